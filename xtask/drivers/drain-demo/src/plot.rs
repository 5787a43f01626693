//! `timeline.svg`: per arm, the connections each replica holds over time, the signal, and every
//! close event A's clients saw (drawn with plotters' SVG backend).

use plotters::prelude::*;

use super::measures::{ArmLog, NO_CLOSE_FRAME, Side};

/// What one arm's panel shows, in seconds since the arm started.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// The panel's title.
    pub title: String,
    /// When A was signalled.
    pub signal_at: f64,
    /// Connections on A, as a step series of (time, count) points.
    pub a: Vec<(f64, f64)>,
    /// Connections on B, the same.
    pub b: Vec<(f64, f64)>,
    /// Each close event: (time, A's count just after it, code).
    pub closes: Vec<(f64, f64, u16)>,
    /// The last event's time.
    pub end: f64,
}

/// Builds an arm's timeline from its log: every joined session adds a connection to its replica,
/// every recorded close removes one.
pub fn timeline(log: &ArmLog) -> Timeline {
    // (time s, side, +1/-1, close code for a close)
    let mut events: Vec<(f64, Side, i64, Option<u16>)> = Vec::new();
    for client in &log.clients {
        for &(at, side) in &client.joined {
            events.push((at / 1000.0, side, 1, None));
        }
        for close in &client.closes {
            let code = close.code.unwrap_or(NO_CLOSE_FRAME);
            events.push((close.at_ms / 1000.0, close.side, -1, Some(code)));
        }
    }
    events.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (mut a, mut b) = (vec![(0.0, 0.0)], vec![(0.0, 0.0)]);
    let (mut na, mut nb) = (0i64, 0i64);
    let mut closes = Vec::new();
    for &(t, side, delta, code) in &events {
        let (series, count) = match side {
            Side::A => (&mut a, &mut na),
            Side::B => (&mut b, &mut nb),
        };
        series.push((t, *count as f64));
        *count += delta;
        series.push((t, *count as f64));
        if let Some(code) = code
            && side == Side::A
        {
            closes.push((t, *count as f64, code));
        }
    }
    let end = events
        .last()
        .map_or(1.0, |e| e.0)
        .max(log.signal_at_ms / 1000.0)
        + 0.5;
    a.push((end, na as f64));
    b.push((end, nb as f64));
    Timeline {
        title: format!(
            "{} arm: replica A gets {}",
            log.arm.name(),
            log.arm.signal().as_str()
        ),
        signal_at: log.signal_at_ms / 1000.0,
        a,
        b,
        closes,
        end,
    }
}

/// The SVG document: one panel per arm, stacked.
// i[impl xtask.drain-demo.outputs+2]
pub fn svg(timelines: &[Timeline]) -> anyhow::Result<String> {
    let mut out = String::new();
    {
        let height = 360 * timelines.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut out, (1000, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let panels = root.split_evenly((timelines.len().max(1), 1));
        for (panel, tl) in panels.iter().zip(timelines) {
            draw_panel(panel, tl)?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(out)
}

fn plot_error<E: std::fmt::Debug>(err: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the timeline: {err:?}")
}

fn draw_panel(
    panel: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    tl: &Timeline,
) -> anyhow::Result<()> {
    // Headroom above the lines for the legend.
    let top = tl.a.iter().chain(&tl.b).map(|p| p.1).fold(1.0, f64::max) * 1.6;
    let mut chart = ChartBuilder::on(panel)
        .caption(&tl.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..tl.end, 0.0..top)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the arm started")
        .y_desc("connections")
        .draw()
        .map_err(plot_error)?;
    let a_color = RGBColor(200, 60, 40);
    let b_color = RGBColor(40, 90, 200);
    // B first, A on top and wider: with equal counts A's line stays visible.
    chart
        .draw_series(LineSeries::new(
            tl.b.iter().copied(),
            b_color.stroke_width(2),
        ))
        .map_err(plot_error)?
        .label("connections on replica B")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], b_color));
    chart
        .draw_series(LineSeries::new(
            tl.a.iter().copied(),
            a_color.stroke_width(3),
        ))
        .map_err(plot_error)?
        .label("connections on replica A")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], a_color));
    chart
        .draw_series(LineSeries::new(
            [(tl.signal_at, 0.0), (tl.signal_at, top)],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_error)?
        .label("signal to replica A")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    let abnormal = RGBColor(220, 0, 0);
    let framed = RGBColor(0, 150, 60);
    chart
        .draw_series(
            tl.closes
                .iter()
                .filter(|c| c.2 == NO_CLOSE_FRAME)
                .map(|&(t, n, _)| Cross::new((t, n), 4, abnormal.stroke_width(1))),
        )
        .map_err(plot_error)?
        .label("close event: no close frame (1006)")
        .legend(move |(x, y)| Cross::new((x + 10, y), 4, abnormal));
    chart
        .draw_series(
            tl.closes
                .iter()
                .filter(|c| c.2 != NO_CLOSE_FRAME)
                .map(|&(t, n, _)| Circle::new((t, n), 3, framed.filled())),
        )
        .map_err(plot_error)?
        .label("close event: close frame (1001 / 1012)")
        .legend(move |(x, y)| Circle::new((x + 10, y), 3, framed.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::measures::{Arm, tests::fixture};
    use super::*;

    // i[verify xtask.drain-demo.outputs+2]
    #[test]
    fn the_timeline_counts_connections_per_replica_and_marks_each_close() {
        let tl = timeline(&fixture(Arm::Control));
        // Two clients joined A, two B; A's two closed, then rejoined B.
        assert_eq!(tl.a.last().unwrap().1, 0.0);
        assert_eq!(tl.b.last().unwrap().1, 4.0);
        let peak_a = tl.a.iter().map(|p| p.1).fold(0.0, f64::max);
        assert_eq!(peak_a, 2.0);
        assert_eq!(tl.closes.len(), 2);
        assert!(tl.closes.iter().all(|c| c.2 == NO_CLOSE_FRAME));
        assert_eq!(tl.signal_at, 1.0);
        // Times never go backwards along a series.
        assert!(tl.a.windows(2).all(|w| w[0].0 <= w[1].0));

        let svg = svg(&[tl, timeline(&fixture(Arm::Graceful))]).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        // One 360-pixel panel per arm, stacked.
        assert!(
            svg.contains(r#"height="720""#),
            "{}",
            &svg[..200.min(svg.len())]
        );
        // One arm, one panel; none still draws one empty panel.
        let one = super::svg(&[timeline(&fixture(Arm::Graceful))]).unwrap();
        assert!(
            one.contains(r#"height="360""#),
            "{}",
            &one[..200.min(one.len())]
        );
        let none = super::svg(&[]).unwrap();
        assert!(
            none.contains(r#"height="360""#),
            "{}",
            &none[..200.min(none.len())]
        );
        for text in [
            "control arm: replica A gets SIGKILL",
            "graceful arm: replica A gets SIGTERM",
            "connections on replica A",
            "connections on replica B",
            "close event: no close frame (1006)",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
    }
}
