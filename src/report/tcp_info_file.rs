//! ctsTraffic's `-TcpInfoFilename` file: one row per connection as it ends,
//! the connection file's columns followed by ctsTraffic's TCP_INFO columns
//! filled from Linux's TCP_INFO, then Linux's own fields. Windows counts
//! some things Linux does not; those cells are left empty rather than
//! filled with a look-alike (see the README's table of the mapping).

use crate::tcp::client::ConnectionRecord;

/// ctsTraffic's TCP_INFO columns, after the connection columns.
pub const CTS_TCP_INFO_HEADERS: [&str; 11] = [
    "BytesReordered",
    "BytesRetransmitted",
    "SynRetransmitted",
    "DupAcksIn",
    "MinRttUs",
    "Mss",
    "TimeoutEpisodes",
    "FastRetransmit",
    "SndLimBytesCwnd",
    "SndLimBytesRwin",
    "SndLimBytesSnd",
];

/// Linux's fields with no ctsTraffic column, last.
pub const LINUX_TCP_INFO_HEADERS: [&str; 10] = [
    "Retransmits",
    "RttUs",
    "RttVarUs",
    "CwndSegments",
    "ReorderEvents",
    "DsackDups",
    "DeliveryRateBps",
    "BusyUs",
    "RwndLimitedUs",
    "SndbufLimitedUs",
];

/// Every column of the file.
pub fn headers() -> Vec<&'static str> {
    super::connection_row::CONNECTION_HEADERS
        .iter()
        .chain(CTS_TCP_INFO_HEADERS.iter())
        .chain(LINUX_TCP_INFO_HEADERS.iter())
        .copied()
        .collect()
}

/// Column widths for the aligned-text form.
pub fn widths() -> Vec<usize> {
    let mut w = super::connection_row::CONNECTION_WIDTHS.to_vec();
    w.extend(CTS_TCP_INFO_HEADERS.iter().map(|h| h.len().max(10)));
    w.extend(LINUX_TCP_INFO_HEADERS.iter().map(|h| h.len().max(10)));
    w
}

/// The row for a connection that came up (it has TCP_INFO); `None` for one
/// that never connected.
pub fn cells(r: &ConnectionRecord) -> Option<Vec<String>> {
    let i = r.tcp_info.as_ref()?;
    let none = String::new;
    let mut c: Vec<String> = super::connection_row::connection_cells(r).to_vec();
    c.extend([
        none(),                      // BytesReordered: Linux counts events, not bytes
        i.bytes_retrans.to_string(), // BytesRetransmitted: tcpi_bytes_retrans
        none(),                      // SynRetransmitted: not in Linux's TCP_INFO
        none(),                      // DupAcksIn: not in Linux's TCP_INFO
        i.min_rtt_us.to_string(),    // MinRttUs: tcpi_min_rtt
        i.snd_mss.to_string(),       // Mss: tcpi_snd_mss
        none(),                      // TimeoutEpisodes: not in this kernel ABI
        none(),                      // FastRetransmit: not in Linux's TCP_INFO
        none(),                      // SndLimBytes*: Linux has times, not bytes
        none(),
        none(),
    ]);
    c.extend([
        i.retransmits.to_string(),
        i.rtt_us.to_string(),
        i.rttvar_us.to_string(),
        i.cwnd.to_string(),
        i.reord_seen.to_string(),
        i.dsack_dups.to_string(),
        (i.delivery_rate.saturating_mul(8)).to_string(),
        i.busy_us.to_string(),
        i.rwnd_limited_us.to_string(),
        i.sndbuf_limited_us.to_string(),
    ]);
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tcp_info_column_is_as_wide_as_its_header_and_at_least_ten() {
        let (h, w) = (headers(), widths());
        assert_eq!(h.len(), w.len());
        let n = super::super::CONNECTION_HEADERS.len();
        assert_eq!(&h[..n], super::super::CONNECTION_HEADERS);
        assert_eq!(
            w[n..],
            [
                14, 18, 16, 10, 10, 10, 15, 14, 15, 15, 14, // ctsTraffic's
                11, 10, 10, 12, 13, 10, 15, 10, 13, 15, // Linux's
            ]
        );
        for (h, w) in h[n..].iter().zip(&w[n..]) {
            assert!(*w >= h.len(), "{h}: {w}");
        }
    }
}
