//! Decoding the step script's replies, and the byte layout of queue members.

use crawler_sched::Entry;
use redis::Value;

/// Bytes before the request JSON in a queue member: flipped priority, seq, worker run tag.
pub(crate) const MEMBER_HEADER: usize = 4 + 8 + 4;

/// Milliseconds from a `TIME` reply (seconds, microseconds).
pub(crate) fn server_ms(time: &[String]) -> Option<f64> {
    let secs: f64 = time.first()?.parse().ok()?;
    let micros: f64 = time.get(1)?.parse().ok()?;
    Some(secs * 1_000.0 + micros / 1_000.0)
}

/// The bytes a reply value takes on the wire, near enough (RESP framing not counted).
pub(crate) fn wire_len(v: &Value) -> usize {
    match v {
        Value::BulkString(b) => b.len(),
        Value::Int(n) => n.to_string().len(),
        Value::Array(a) => a.iter().map(wire_len).sum(),
        Value::SimpleString(s) => s.len(),
        _ => 1,
    }
}

pub(crate) fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

pub(crate) fn int_at(v: &[Value], i: usize) -> i64 {
    v.get(i).map_or(0, int)
}

pub(crate) fn float_at(v: &[Value], i: usize) -> f64 {
    match v.get(i) {
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0),
        Some(Value::Int(n)) => *n as f64,
        _ => 0.0,
    }
}

pub(crate) fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    }
}

/// The queue member of an entry: bytes sort in serving order (priority high to low, then
/// seq), then the worker run's random tag (two runs may use the same seq), then the
/// request.
pub(crate) fn member(entry: &Entry, worker: u32) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(&entry.request)?;
    let mut m = Vec::with_capacity(MEMBER_HEADER + json.len());
    // Order-preserving map of i32 to u32, then inverted so that higher priority is smaller.
    let prio = !((entry.priority as u32) ^ 0x8000_0000);
    m.extend_from_slice(&prio.to_be_bytes());
    m.extend_from_slice(&entry.seq.to_be_bytes());
    m.extend_from_slice(&worker.to_be_bytes());
    m.extend_from_slice(&json);
    Ok(m)
}
