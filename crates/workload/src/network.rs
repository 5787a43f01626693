//! What to do about the node's network, decided from the daemon's networks of its name. Pure: the
//! shell (`docker::create_node_network`) lists, asks [`settle`], acts and asks again.

/// One network of the node network's name, as the daemon lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub id: String,
    /// The daemon's creation time, RFC 3339 (Go's, with the fraction's trailing zeros cut).
    pub created: String,
    pub driver: String,
    /// Whether it carries `holdfast.network=node`.
    pub labelled: bool,
}

impl Found {
    fn ours(&self) -> bool {
        self.driver == "bridge" && self.labelled
    }
}

/// The next step towards exactly one node network of the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settle {
    /// None exists: create it.
    Create,
    /// Exactly one, ours: join it, by this id (its name may be shared again a moment later).
    Use(String),
    /// Two or more of ours, and the one this start created is not the oldest, or is the oldest
    /// but a newer one stayed (its creator saw only its own and went on with it): remove it.
    Remove(String),
    /// Two or more of ours, the newer ones another creator's that it will remove: ask again soon.
    Wait,
    /// Two or more of ours stayed although this start made none of them (their creator gone,
    /// say stopped while it waited): all of them, oldest first, to keep one and remove the rest
    /// that no container is on.
    Prune(Vec<String>),
    /// One of that name is someone else's.
    Foreign { id: String, driver: String },
}

/// A sortable form of a daemon timestamp (RFC 3339, Go's with the fraction's trailing zeros
/// cut): one that does not parse sorts after every one that does, so it is never the one kept.
fn created_key(created: &str) -> (bool, Option<time::OffsetDateTime>) {
    let parsed =
        time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339).ok();
    (parsed.is_none(), parsed)
}

// r[impl workload.network.create]
/// Decides from `found` (every network of the name) and `mine` (the id this start created, if
/// it did): the oldest of ours is the one every creator keeps, so two racing creators agree.
/// A network's creation time is taken before the daemon lists it, so a creator may see only its
/// own, go on with it, and leave an older one to appear later: the creator of that older one
/// waits, and once `impatient` (a newer one stayed) removes its own instead. Once `impatient`,
/// a start that made none removes the newer ones left behind.
pub(crate) fn settle(found: &[Found], mine: Option<&str>, impatient: bool) -> Settle {
    if let Some(foreign) = found.iter().find(|f| !f.ours()) {
        return Settle::Foreign {
            id: foreign.id.clone(),
            driver: foreign.driver.clone(),
        };
    }
    let mut sorted: Vec<&Found> = found.iter().collect();
    sorted.sort_by(|a, b| (created_key(&a.created), &a.id).cmp(&(created_key(&b.created), &b.id)));
    let Some(oldest) = sorted.first() else {
        return Settle::Create;
    };
    if sorted.len() == 1 {
        return Settle::Use(oldest.id.clone());
    }
    let mine = mine.filter(|m| found.iter().any(|f| f.id == *m));
    match mine {
        Some(mine) if impatient || mine != oldest.id => Settle::Remove(mine.to_owned()),
        None if impatient => Settle::Prune(sorted.iter().map(|f| f.id.clone()).collect()),
        _ => Settle::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(id: &str, created: &str) -> Found {
        Found {
            id: id.into(),
            created: created.into(),
            driver: "bridge".into(),
            labelled: true,
        }
    }

    // r[verify workload.network.create]
    #[test]
    fn none_is_created_one_of_ours_is_used() {
        assert_eq!(settle(&[], None, false), Settle::Create);
        // Removed meanwhile by someone: created again.
        assert_eq!(settle(&[], Some("a"), false), Settle::Create);
        let one = [ours("a", "2026-12-06T11:03:38.1Z")];
        assert_eq!(settle(&one, None, false), Settle::Use("a".into()));
        assert_eq!(settle(&one, Some("a"), false), Settle::Use("a".into()));
        // A conflict re-read: the other creator's, ours by driver and label.
        assert_eq!(settle(&one, Some("b"), false), Settle::Use("a".into()));
    }

    // r[verify workload.network.create]
    #[test]
    fn of_two_racing_creators_the_newer_removes_its_own() {
        // `.19` is before `.2` although it sorts after it as text.
        let two = [
            ours("b", "2026-12-06T11:03:38.2Z"),
            ours("a", "2026-12-06T11:03:38.19Z"),
        ];
        assert_eq!(settle(&two, Some("b"), false), Settle::Remove("b".into()));
        assert_eq!(settle(&two, Some("a"), false), Settle::Wait);
        assert_eq!(settle(&two, None, false), Settle::Wait);
        // One instant: the smaller id is the older, for both creators alike.
        let tie = [
            ours("b", "2026-12-06T11:03:38Z"),
            ours("a", "2026-12-06T11:03:38Z"),
        ];
        assert_eq!(settle(&tie, Some("b"), false), Settle::Remove("b".into()));
        assert_eq!(settle(&tie, Some("a"), false), Settle::Wait);
        // The newer one stayed: its creator went on with it, and the oldest's creator gives way.
        assert_eq!(settle(&two, Some("a"), true), Settle::Remove("a".into()));
        // One that created none waits, then prunes them, oldest first (a creator stopped
        // while it waited left them, or its own is gone).
        assert_eq!(settle(&two, None, false), Settle::Wait);
        let both = Settle::Prune(vec!["a".into(), "b".into()]);
        assert_eq!(settle(&two, None, true), both);
        assert_eq!(settle(&two, Some("gone"), true), both);
        // Once its own is gone, the one left is used.
        assert_eq!(settle(&two[..1], None, true), Settle::Use("b".into()));
    }

    // r[verify workload.network.create]
    #[test]
    fn someone_elses_network_of_the_name_is_refused() {
        let unlabelled = Found {
            labelled: false,
            ..ours("x", "2026-12-06T11:03:38Z")
        };
        let overlay = Found {
            driver: "overlay".into(),
            ..ours("y", "2026-12-06T11:03:38Z")
        };
        for other in [unlabelled, overlay] {
            let expected = Settle::Foreign {
                id: other.id.clone(),
                driver: other.driver.clone(),
            };
            assert_eq!(settle(std::slice::from_ref(&other), None, false), expected);
            assert_eq!(
                settle(
                    &[ours("a", "2026-12-06T11:03:37Z"), other],
                    Some("a"),
                    false
                ),
                expected
            );
        }
    }

    // r[verify workload.network.create]
    #[test]
    fn a_timestamp_that_is_not_one_is_never_the_oldest() {
        let two = [ours("a", ""), ours("b", "2026-12-06T11:03:38Z")];
        assert_eq!(settle(&two, Some("a"), false), Settle::Remove("a".into()));
        assert_eq!(
            settle(&two, None, true),
            Settle::Prune(vec!["b".into(), "a".into()])
        );
        assert!(created_key("é") > created_key("2026-12-06T11:03:38+01:00"));
    }

    /// Go's RFC 3339 form of `t`: nanoseconds with trailing zeros cut, `Z` or an offset.
    fn go_format(t: time::OffsetDateTime) -> String {
        let fraction = format!("{:09}", t.nanosecond());
        let fraction = fraction.trim_end_matches('0');
        let offset = t.offset();
        let zone = if offset.is_utc() {
            "Z".to_owned()
        } else {
            let (h, m, _) = offset.as_hms();
            format!(
                "{}{:02}:{:02}",
                if offset.is_negative() { '-' } else { '+' },
                h.abs(),
                m.abs()
            )
        };
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}{}{zone}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            if fraction.is_empty() { "" } else { "." },
            fraction
        )
    }

    proptest::proptest! {
        // r[verify workload.network.create]
        #[test]
        fn daemon_timestamps_sort_by_the_instant_they_name(
            a in 1_600_000_000_000_000_000i128..1_900_000_000_000_000_000i128,
            b in 1_600_000_000_000_000_000i128..1_900_000_000_000_000_000i128,
            offset_a in -12i8..=12,
            offset_b in -12i8..=12,
        ) {
            let at = |nanos: i128, hours: i8| {
                time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
                    .unwrap()
                    .to_offset(time::UtcOffset::from_hms(hours, 0, 0).unwrap())
            };
            let (ta, tb) = (at(a, offset_a), at(b, offset_b));
            proptest::prop_assert_eq!(
                created_key(&go_format(ta)).cmp(&created_key(&go_format(tb))),
                ta.cmp(&tb)
            );
        }
    }
}
