//! The connection file's row (ctsTraffic's connection columns plus
//! netrig's), shared by the connection file and the TCP_INFO file.

use crate::tcp::client::ConnectionRecord;

/// Columns of the connection file.
pub const CONNECTION_HEADERS: [&str; 13] = [
    "TimeSlice",
    "LocalAddress",
    "RemoteAddress",
    "SendBytes",
    "SendBps",
    "RecvBytes",
    "RecvBps",
    "TimeMs",
    "BufferSize",
    "Result",
    "ErrorDetail",
    "ConnectionId",
    "ConnectMs",
];
pub(super) const CONNECTION_WIDTHS: [usize; 13] =
    [10, 47, 47, 12, 12, 12, 12, 10, 10, 12, 0, 36, 10];

pub(super) fn connection_cells(r: &ConnectionRecord) -> [String; 13] {
    let secs = r.time_ms / 1e3;
    let bps = |b: u64| {
        if secs > 0.0 {
            ((b as f64) / secs).round() as u64
        } else {
            0
        }
    };
    [
        format!("{:.3}", r.time_slice),
        r.local.map_or_else(|| "-".to_string(), |a| a.to_string()),
        r.remote.to_string(),
        r.sent.to_string(),
        bps(r.sent).to_string(),
        r.received.to_string(),
        bps(r.received).to_string(),
        format!("{:.3}", r.time_ms),
        r.buffer.to_string(),
        r.result.kind.to_string(),
        r.result.detail.clone(),
        r.connection_id.to_string(),
        format!("{:.3}", r.connect_ms),
    ]
}
