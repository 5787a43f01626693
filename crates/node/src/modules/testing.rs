//! Test-only modules, enabled by the `[testing]` config section for the binary's own subprocess
//! tests. Compiled only with the `testing-modules` feature (never on by default); the node logs a
//! warning when one runs.

use holdfast_lifecycle::{Health, health_channel, stopper_fn};

use crate::module::{Module, ModuleError, StartError, Started, StopGroup};

/// A module whose stopper never returns, so the stop plan must cut it off at its budget.
#[derive(Debug, Clone, Copy, Default)]
pub struct HangOnStop;

/// Its name.
pub const HANG_NAME: &str = "testing-hang";

impl Module for HangOnStop {
    fn name(&self) -> &str {
        HANG_NAME
    }

    fn group(&self) -> StopGroup {
        StopGroup::Workload
    }

    fn start(&self) -> Result<Started, StartError> {
        let (reporter, health) = health_channel();
        reporter.set(Health::Ready);
        let task = tokio::spawn(async move {
            let _reporter = reporter;
            std::future::pending::<()>().await;
            Ok::<(), ModuleError>(())
        });
        let stopper = stopper_fn(|_request| async {
            std::future::pending::<()>().await;
            Ok(())
        });
        Ok(Started {
            stopper,
            health,
            task,
        })
    }
}

/// A module whose start never returns and blocks the thread it runs on (a synchronous start that
/// hangs), so its supervisor's loop never turns again: the watchdog's pings must stop.
#[derive(Debug, Clone, Copy, Default)]
pub struct WedgeStart;

/// Its name.
pub const WEDGE_NAME: &str = "testing-wedge";

impl Module for WedgeStart {
    fn name(&self) -> &str {
        WEDGE_NAME
    }

    fn group(&self) -> StopGroup {
        StopGroup::Workload
    }

    fn start(&self) -> Result<Started, StartError> {
        // Blocking on purpose: this is the wedge under test (park may wake spuriously).
        loop {
            std::thread::park();
        }
    }
}
