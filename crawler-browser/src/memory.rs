//! [`ProcessTreeMemory`]: what a browser costs in memory. Chromium is many processes (the
//! browser, one renderer per site or tab, GPU and network services), so the memory of the
//! one process a crawler starts says little: this sums a process and all its descendants,
//! read from Linux's `/proc`.

use std::collections::{HashMap, HashSet};

/// The memory of a process and every process under it, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessTreeMemory {
    /// Processes counted (the root included).
    pub processes: usize,
    /// The sum of their resident sets (`VmRSS`). Pages shared between them (chromium's
    /// code, shared memory between its processes) are counted once per process, so this
    /// overstates the tree's footprint.
    pub rss_bytes: u64,
    /// The sum of their proportional sets (`Pss` of `smaps_rollup`: each shared page split
    /// between the processes that map it), the footprint without double counting; `None`
    /// where the system does not show it.
    pub pss_bytes: Option<u64>,
}

impl ProcessTreeMemory {
    /// The memory of `pid` and its descendants now; `None` if `pid` is not running or
    /// `/proc` cannot be read.
    pub fn of(pid: u32) -> Option<Self> {
        let parents = parents()?;
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for (&child, &parent) in &parents {
            children.entry(parent).or_default().push(child);
        }
        let mut tree = vec![pid];
        let mut seen = HashSet::from([pid]);
        let mut i = 0;
        while let Some(&p) = tree.get(i) {
            for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
                if seen.insert(c) {
                    tree.push(c);
                }
            }
            i += 1;
        }
        let mut total = Self::default();
        let mut pss = Some(0u64);
        for p in tree {
            // A process may end between the listing and the read: it costs nothing then.
            let Some(rss) = kib(&format!("/proc/{p}/status"), "VmRSS:") else {
                if p == pid {
                    return None;
                }
                continue;
            };
            total.processes += 1;
            total.rss_bytes += rss * 1024;
            pss = match (pss, kib(&format!("/proc/{p}/smaps_rollup"), "Pss:")) {
                (Some(sum), Some(v)) => Some(sum + v * 1024),
                _ => None,
            };
        }
        total.pss_bytes = pss;
        Some(total)
    }

    /// [`Self::rss_bytes`] in MiB.
    pub fn rss_mib(&self) -> f64 {
        self.rss_bytes as f64 / (1024.0 * 1024.0)
    }

    /// [`Self::pss_bytes`] in MiB.
    pub fn pss_mib(&self) -> Option<f64> {
        self.pss_bytes.map(|b| b as f64 / (1024.0 * 1024.0))
    }
}

/// Every running process's parent, from `/proc/<pid>/stat`.
fn parents() -> Option<HashMap<u32, u32>> {
    let mut parents = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces or parentheses itself:
        // the fields after the last `)` are the state, then the parent's id.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parents.insert(pid, ppid);
        }
    }
    Some(parents)
}

/// The value in kB of the line starting with `key` in a `/proc` file.
fn kib(path: &str, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_counts_its_children() {
        // This process alone, then with two children of its own: each child is counted
        // and adds its resident set.
        let me = std::process::id();
        let alone = ProcessTreeMemory::of(me).expect("this process");
        let mut kids: Vec<_> = (0..2)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .expect("sleep runs")
            })
            .collect();
        let with = ProcessTreeMemory::of(me).expect("this process");
        for k in &mut kids {
            let _ = k.kill();
            let _ = k.wait();
        }
        assert_eq!(with.processes, alone.processes + 2, "{alone:?} {with:?}");
        assert!(with.rss_bytes > alone.rss_bytes, "{alone:?} {with:?}");
        assert!(with.pss_bytes.is_some());
        assert_eq!(ProcessTreeMemory::of(u32::MAX), None);
    }
}
