//! The command `safewrite lead` runs while it leads: started in a process group of its
//! own (so that a signal reaches everything it started), with the fence in its
//! environment, waited for off the async threads, and stopped with SIGTERM, then SIGKILL
//! after a grace period.

use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::task::JoinHandle;

/// The variable that names the Lease the command runs under (`NAMESPACE/NAME`).
pub const LEASE_VARIABLE: &str = "SAFEWRITE_LEASE";
/// The variable that holds the epoch of the leadership the command runs under.
pub const EPOCH_VARIABLE: &str = "SAFEWRITE_LEASE_EPOCH";

/// A running command: its process group, and its end.
pub struct Running {
    group: Option<Pid>,
    ended: JoinHandle<std::io::Result<ExitStatus>>,
}

impl Running {
    /// Starts `argv` (a program and its arguments, looked up on `PATH`) in a new process
    /// group, with stdin, stdout and stderr inherited and the fence in its environment.
    ///
    /// # Errors
    /// The program cannot be started (not found, not executable).
    pub fn start(argv: &[String], lease: &str, epoch: u64) -> std::io::Result<Running> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("no command given"))?;
        let mut child = Command::new(program)
            .args(args)
            .env(LEASE_VARIABLE, lease)
            .env(EPOCH_VARIABLE, epoch.to_string())
            .process_group(0)
            .spawn()?;
        let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
        let ended = tokio::task::spawn_blocking(move || child.wait());
        Ok(Running { group, ended })
    }

    /// Waits until the command ends by itself.
    pub async fn wait(&mut self) -> ExitStatus {
        match (&mut self.ended).await {
            Ok(Ok(status)) => status,
            // It cannot be waited for: report it as killed.
            _ => ExitStatus::from_raw(Signal::KILL.as_raw()),
        }
    }

    /// Sends `signal` to the command's process group (a group already gone is no error).
    pub fn signal(&self, signal: Signal) {
        if let Some(group) = self.group {
            let _ = kill_process_group(group, signal);
        }
    }

    /// Sends `first` to the group, waits up to `grace` for the command to end, then
    /// sends SIGKILL; returns how it ended.
    pub async fn stop(mut self, first: Signal, grace: Duration) -> ExitStatus {
        self.signal(first);
        if let Ok(status) = tokio::time::timeout(grace, self.wait()).await {
            return status;
        }
        self.signal(Signal::KILL);
        self.wait().await
    }
}

/// The exit code a shell gives a command that ended with `status`: its own code, or 128
/// plus the signal that killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

/// The exit code of a process killed by `signal`, as a shell gives it: 128 plus it.
pub fn exit_code_of_signal(signal: Signal) -> u8 {
    u8::try_from((128 + signal.as_raw()) & 0xff).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        ["sh", "-c", script].map(String::from).to_vec()
    }

    #[tokio::test]
    async fn the_command_sees_the_fence_and_its_code_is_passed_on() {
        let script = r#"[ "$SAFEWRITE_LEASE" = ns/l ] && exit "$SAFEWRITE_LEASE_EPOCH""#;
        let mut running = Running::start(&sh(script), "ns/l", 7).unwrap();
        assert_eq!(exit_code(running.wait().await), 7);
        assert!(Running::start(&["safewrite-no-such-command".to_string()], "ns/l", 1).is_err());
    }

    #[tokio::test]
    async fn stopping_signals_the_whole_group_then_kills_it() {
        // Stops at SIGTERM: 128 + 15.
        let running = Running::start(&sh("sleep 30"), "ns/l", 1).unwrap();
        let status = running.stop(Signal::TERM, Duration::from_secs(5)).await;
        assert_eq!(exit_code(status), 143);
        // Ignores SIGTERM: killed after the grace period, 128 + 9.
        let running = Running::start(&sh("trap '' TERM; sleep 30 & wait"), "ns/l", 1).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        let status = running.stop(Signal::TERM, Duration::from_millis(300)).await;
        assert_eq!(exit_code(status), 137);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
