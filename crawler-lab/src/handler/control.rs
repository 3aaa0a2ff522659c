//! The lab's own endpoints under `/_lab/` (never recorded nor limited).

use super::{Live, Shared};
use crate::faults::FaultKind;
use crate::server::{Reply, Req};

pub(super) fn lab_endpoint(shared: &Shared, rest: &str, req: &Req<'_>, reply: &mut Reply) {
    reply.header("Content-Type", "application/json");
    reply.header("Cache-Control", "no-store");
    match rest {
        "report" => reply
            .body
            .extend_from_slice(shared.recorder.report().to_json().as_bytes()),
        "reset" => {
            shared.recorder.clear();
            shared.all_live().for_each(Live::reset);
            reply.body.extend_from_slice(b"{\"reset\":true}\n");
        }
        "faults" => {
            let map: std::collections::BTreeMap<String, FaultKind> = (1..=shared.catalogue.books)
                .filter_map(|id| {
                    let p = format!("/catalogue/book-{id}.html");
                    shared.expected_fault(&p).map(|k| (p, k))
                })
                .collect();
            reply.body = serde_json::to_vec_pretty(&map).unwrap_or_default();
        }
        "mutate" => {
            let fraction = req
                .query("fraction")
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.05);
            let changed = shared.catalogue.mutate(fraction);
            let body = serde_json::json!({
                "version": shared.catalogue.version(),
                "changed": changed,
            });
            reply.body = serde_json::to_vec(&body).unwrap_or_default();
        }
        _ => {
            reply.status = 404;
            reply.body.extend_from_slice(b"{\"error\":\"unknown lab endpoint; try /_lab/report, /_lab/reset, /_lab/faults, /_lab/mutate?fraction=0.05\"}\n");
        }
    }
}
