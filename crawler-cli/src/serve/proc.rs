//! Signals to a job's process and whether a process is still the job's.
//!
//! A job runs in a process group of its own (so a Ctrl-C at the service's terminal does not
//! reach it, and the browser a job may start dies with it on SIGKILL). SIGTERM goes to the
//! crawl alone, which stops gracefully (requests in flight finish, the job directory can be
//! resumed); SIGKILL goes to the whole group.

use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

fn pid_of(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// Ask the job's crawl to stop gracefully.
pub(super) fn terminate(pid: u32) {
    if let Some(p) = pid_of(pid)
        && let Err(e) = kill_process(p, Signal::TERM)
    {
        tracing::debug!("SIGTERM to job process {pid}: {e}");
    }
}

/// Kill the job's process group now.
pub(super) fn kill(pid: u32) {
    if let Some(p) = pid_of(pid)
        && kill_process_group(p, Signal::KILL).is_err()
    {
        // Not a group leader (started some other way): the process alone.
        let _ = kill_process(p, Signal::KILL);
    }
}

/// Whether `pid` is alive and still the job `id`'s process (its command line names the
/// job's directory), not a process that got the number after the job's ended.
pub(super) fn is_job_process(pid: u32, id: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name in parentheses: a zombie is gone already.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, Some("Z" | "X" | "x")) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let needle = format!("/jobs/{id}/");
    cmdline
        .split(|b| *b == 0)
        .any(|arg| String::from_utf8_lossy(arg).contains(&needle))
}

/// Stop a process left running by a previous run of the service: SIGTERM, then SIGKILL
/// after `grace`; returns once it is gone (bounded: `grace` plus a few seconds).
pub(super) async fn stop_orphan(pid: u32, id: &str, grace: Duration) {
    terminate(pid);
    if wait_gone(pid, id, grace).await {
        return;
    }
    tracing::warn!("job {id}: process {pid} did not stop in {grace:?}; killing it");
    kill(pid);
    wait_gone(pid, id, Duration::from_secs(5)).await;
}

async fn wait_gone(pid: u32, id: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if !is_job_process(pid, id) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    !is_job_process(pid, id)
}
