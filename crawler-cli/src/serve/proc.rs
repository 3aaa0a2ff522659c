//! Signals to a job's process and whether a process is still the job's.
//!
//! A job runs in a process group of its own (so a Ctrl-C at the service's terminal does not
//! reach it, and the browser a job may start dies with it on SIGKILL). SIGTERM goes to the
//! crawl alone, which stops gracefully (requests in flight finish, the job directory can be
//! resumed); SIGKILL goes to the whole group.

use std::path::Path;
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

/// Whether `pid` is alive and still the process of the job whose directory is `dir` (an
/// argument of its command line lies under `dir`), not a process that got the number after
/// the job's ended, nor a job of the same name under another service's root.
pub(super) fn is_job_process(pid: u32, dir: &Path) -> bool {
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
    let needle = format!("{}/", dir.display());
    cmdline
        .split(|b| *b == 0)
        .any(|arg| String::from_utf8_lossy(arg).starts_with(&needle))
}

/// Every live process of the job whose directory is `dir`, found by their command lines. A
/// service killed between starting a job's process and writing its number down leaves a
/// process only this finds; a second run of the job beside it would fail on the job's
/// locked state.
pub(super) fn job_processes(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| is_job_process(*pid, dir))
        .collect()
}

/// Stop a process left running by a previous run of the service: SIGTERM, then SIGKILL
/// after `grace`; returns once it is gone (bounded: `grace` plus a few seconds).
pub(super) async fn stop_orphan(pid: u32, dir: &Path, grace: Duration) {
    terminate(pid);
    if wait_gone(pid, dir, grace).await {
        return;
    }
    tracing::warn!(
        "job {}: process {pid} did not stop in {grace:?}; killing it",
        dir.display()
    );
    kill(pid);
    wait_gone(pid, dir, Duration::from_secs(5)).await;
}

async fn wait_gone(pid: u32, dir: &Path, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if !is_job_process(pid, dir) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    !is_job_process(pid, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a job's process: a shell whose command line names the job's state
    /// directory, as the crawl's `--job-dir` argument does, and that leaves on SIGTERM.
    fn fake_job(dir: &Path) -> std::process::Child {
        std::process::Command::new("sh")
            .arg("-c")
            .arg("trap 'exit 0' TERM; while :; do sleep 0.05; done")
            .arg(dir.join("state"))
            .spawn()
            .expect("sh starts")
    }

    #[tokio::test]
    async fn a_jobs_processes_are_found_by_its_directory_and_stopped() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("jobs").join("job-1");
        let mut child = fake_job(&dir);
        let pid = child.id();
        assert_eq!(job_processes(&dir), vec![pid]);
        // Another job whose name starts with this one's, and the same name under another
        // service's root, are not this job.
        assert!(job_processes(&root.path().join("jobs").join("job-")).is_empty());
        let other = tempfile::tempdir().expect("tempdir");
        assert!(job_processes(&other.path().join("jobs").join("job-1")).is_empty());
        stop_orphan(pid, &dir, Duration::from_secs(10)).await;
        let status = child.wait().expect("reaped");
        assert!(status.success(), "stopped by SIGTERM: {status:?}");
        assert!(job_processes(&dir).is_empty());
    }
}
