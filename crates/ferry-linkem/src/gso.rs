//! GSO super-packets on the TUN devices, as pure byte arithmetic: the
//! `virtio_net_hdr` that precedes every packet on a TUN opened with
//! `IFF_VNET_HDR`, and the cutting of a TCP/IPv4 super-packet into the
//! segments the sender's kernel would have put on a real wire.
//!
//! Why: one `read(2)` and one `write(2)` per 1500-byte packet made the
//! forwarder a packet-rate limit (0.5-0.9 Gbit/s on our 2-core VMs). With
//! TSO offered on the TUN devices (`TUNSETOFFLOAD`), the sending kernel hands
//! us up to 64 kB of TCP payload per read and the receiving kernel takes it
//! back whole per write (as a virtio NIC's host does), so the per-syscall
//! cost is paid once per ~44 segments. The link's rules still apply per
//! segment: the bottleneck counts every segment's headers
//! ([`Gso::wire_bytes`]), and a super-packet that loses a segment on the
//! wire is cut here ([`cut_tcp4`]) so that exactly that segment is missing.
//!
//! Layout references: `include/uapi/linux/virtio_net.h` (the header, in the
//! host's byte order for TUN unless `TUNSETVNETLE/BE`), RFC 791 (IPv4
//! header, checksum), RFC 9293 (TCP header), and Linux's
//! `tcp_gso_segment` for what changes between segments (sequence number,
//! IP id, FIN/PSH on the last one only, CWR on the first one only).

/// Size of `struct virtio_net_hdr` (without the mergeable-buffers count).
pub const VNET_HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at `csum_start +
/// csum_offset` holds only the pseudo-header sum; the receiver may trust
/// the data (local delivery does not verify it).
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_ECN` (a flag on `gso_type`).
pub const GSO_ECN: u8 = 0x80;

const IPPROTO_TCP: u8 = 6;
/// Offset of the checksum in the TCP header.
const TCP_CSUM_OFFSET: u16 = 16;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// The `virtio_net_hdr` in front of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Read the header at the start of `b` (host byte order).
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        let h = b.get(..VNET_HDR_LEN)?;
        let u16_at = |i: usize| u16::from_ne_bytes([h[i], h[i + 1]]);
        Some(VnetHdr {
            flags: h[0],
            gso_type: h[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    /// The header's 10 bytes.
    pub fn to_bytes(self) -> [u8; VNET_HDR_LEN] {
        let mut o = [0u8; VNET_HDR_LEN];
        o[0] = self.flags;
        o[1] = self.gso_type;
        o[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        o[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        o[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        o[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
        o
    }
}

/// Where a TCP/IPv4 super-packet's headers and payload are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gso {
    /// IPv4 header length.
    pub ip_len: usize,
    /// IPv4 + TCP header length.
    pub hdr_len: usize,
    /// Payload bytes per segment (the MSS).
    pub mss: usize,
    /// Payload bytes in all.
    pub payload: usize,
}

impl Gso {
    /// Recognise a TCP/IPv4 super-packet (`ip` is the IP packet, after the
    /// virtio header). `None` for anything the link should carry as one
    /// packet: no GSO, another protocol, or headers that do not add up.
    pub fn of(h: &VnetHdr, ip: &[u8]) -> Option<Gso> {
        if h.gso_type & !GSO_ECN != GSO_TCPV4 || h.gso_size == 0 {
            return None;
        }
        let first = *ip.first()?;
        if first >> 4 != 4 || *ip.get(9)? != IPPROTO_TCP {
            return None;
        }
        let ip_len = usize::from(first & 0x0f) * 4;
        let doff = usize::from(*ip.get(ip_len + 12)? >> 4) * 4;
        let hdr_len = ip_len + doff;
        if ip_len < 20 || doff < 20 || hdr_len > ip.len() {
            return None;
        }
        let payload = ip.len() - hdr_len;
        let mss = usize::from(h.gso_size);
        (payload > 0).then_some(Gso {
            ip_len,
            hdr_len,
            mss,
            payload,
        })
    }

    /// How many segments it is on the wire.
    pub fn segments(&self) -> usize {
        self.payload.div_ceil(self.mss).max(1)
    }

    /// Bytes on the wire: the payload plus every segment's headers.
    pub fn wire_bytes(&self) -> usize {
        self.payload + self.segments() * self.hdr_len
    }
}

/// Ones' complement sum of `b` (16-bit big-endian words), not folded.
fn sum16(b: &[u8], mut acc: u64) -> u64 {
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Cut the super-packet `ip` (the IP packet after its virtio header,
/// described by `g`) into its segments, each with its own virtio header (no GSO; the TCP
/// checksum left to the receiver as `NEEDS_CSUM`, holding the pseudo-header
/// sum as Linux's `tcp_v4_send_check` does) and IPv4 header (length,
/// id + i, checksum). Calls `out(i, bytes)` per segment.
pub fn cut_tcp4(g: &Gso, ip: &[u8], mut out: impl FnMut(usize, Vec<u8>)) {
    let (Some(hdrs), Some(payload)) = (ip.get(..g.hdr_len), ip.get(g.hdr_len..)) else {
        return;
    };
    let seg_hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_NONE,
        hdr_len: g.hdr_len as u16,
        gso_size: 0,
        csum_start: g.ip_len as u16,
        csum_offset: TCP_CSUM_OFFSET,
    }
    .to_bytes();
    let tcp_at = g.ip_len;
    let id0 = u16::from_be_bytes([hdrs[4], hdrs[5]]);
    let seq0 = u32::from_be_bytes([
        hdrs[tcp_at + 4],
        hdrs[tcp_at + 5],
        hdrs[tcp_at + 6],
        hdrs[tcp_at + 7],
    ]);
    let flags0 = hdrs[tcp_at + 13];
    let n = g.segments();
    for (i, chunk) in payload.chunks(g.mss).enumerate() {
        let mut s = Vec::with_capacity(VNET_HDR_LEN + g.hdr_len + chunk.len());
        s.extend_from_slice(&seg_hdr);
        s.extend_from_slice(hdrs);
        s.extend_from_slice(chunk);
        let p = &mut s[VNET_HDR_LEN..];
        let total = (g.hdr_len + chunk.len()) as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
        p[10..12].copy_from_slice(&[0, 0]);
        let ip_csum = !fold(sum16(&p[..g.ip_len], 0));
        p[10..12].copy_from_slice(&ip_csum.to_be_bytes());
        let seq = seq0.wrapping_add((i * g.mss) as u32);
        p[tcp_at + 4..tcp_at + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = flags0;
        if i + 1 < n {
            flags &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            flags &= !TCP_CWR;
        }
        p[tcp_at + 13] = flags;
        // Pseudo-header: source, destination, protocol, TCP length.
        let tcp_len = (total as usize - g.ip_len) as u64;
        let pseudo = sum16(&p[12..20], u64::from(IPPROTO_TCP) + tcp_len);
        p[tcp_at + 16..tcp_at + 18].copy_from_slice(&fold(pseudo).to_be_bytes());
        out(i, s);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    /// A TCP/IPv4 packet 198.18.0.1:5000 -> 198.19.0.1:22 with `payload`
    /// bytes, seq 1000, id 7, flags PSH|ACK|FIN|CWR.
    fn packet(payload: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&7u16.to_be_bytes());
        p[8] = 64;
        p[9] = IPPROTO_TCP;
        p[12..16].copy_from_slice(&[198, 18, 0, 1]);
        p[16..20].copy_from_slice(&[198, 19, 0, 1]);
        p[20..22].copy_from_slice(&5000u16.to_be_bytes());
        p[22..24].copy_from_slice(&22u16.to_be_bytes());
        p[24..28].copy_from_slice(&1000u32.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = TCP_PSH | 0x10 | TCP_FIN | TCP_CWR;
        for (i, b) in p[40..].iter_mut().enumerate() {
            *b = i as u8;
        }
        p
    }

    fn gso_hdr(mss: u16) -> VnetHdr {
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 40,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        }
    }

    #[test]
    fn header_round_trips() {
        let h = gso_hdr(1448);
        assert_eq!(VnetHdr::parse(&h.to_bytes()), Some(h));
        assert_eq!(VnetHdr::parse(&[0; 9]), None);
    }

    #[test]
    fn wire_bytes_count_every_segments_headers() {
        let p = packet(3000);
        let g = Gso::of(&gso_hdr(1448), &p).unwrap();
        assert_eq!(g.segments(), 3);
        assert_eq!(g.wire_bytes(), 3000 + 3 * 40);
        // No GSO, UDP, IPv6 or a header past the end: one packet.
        assert_eq!(Gso::of(&VnetHdr::default(), &p), None);
        let mut udp = p.clone();
        udp[9] = 17;
        assert_eq!(Gso::of(&gso_hdr(1448), &udp), None);
        assert_eq!(Gso::of(&gso_hdr(1448), &p[..30]), None);
        assert_eq!(Gso::of(&gso_hdr(1448), &[0x60]), None);
    }

    #[test]
    fn cutting_gives_what_the_sender_would_have_sent() {
        let p = packet(3000);
        let h = gso_hdr(1448);
        let g = Gso::of(&h, &p).unwrap();
        let mut segs = Vec::new();
        cut_tcp4(&g, &p, |i, s| segs.push((i, s)));
        assert_eq!(segs.len(), 3);
        let mut payload = Vec::new();
        for (i, s) in &segs {
            let vh = VnetHdr::parse(s).unwrap();
            assert_eq!(
                (vh.gso_type, vh.flags, vh.csum_start, vh.csum_offset),
                (0, 1, 20, 16)
            );
            let ip = &s[VNET_HDR_LEN..];
            let len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            assert_eq!(len, ip.len());
            assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 7 + *i as u16);
            // A valid IPv4 header sums to 0xffff.
            assert_eq!(fold(sum16(&ip[..20], 0)), 0xffff);
            let seq = u32::from_be_bytes([ip[24], ip[25], ip[26], ip[27]]);
            assert_eq!(seq, 1000 + (*i as u32) * 1448);
            let flags = ip[33];
            assert_eq!(flags & TCP_FIN != 0, *i == 2, "FIN on the last only");
            assert_eq!(flags & TCP_PSH != 0, *i == 2, "PSH on the last only");
            assert_eq!(flags & TCP_CWR != 0, *i == 0, "CWR on the first only");
            // Completing the partial checksum over the TCP segment gives a
            // segment that verifies: sum(pseudo) + sum(segment with the
            // pseudo sum in place) complemented into the field.
            let mut full = ip.to_vec();
            let partial = u16::from_be_bytes([full[36], full[37]]);
            full[36..38].copy_from_slice(&[0, 0]);
            let c = !fold(sum16(&full[20..], u64::from(partial)));
            full[36..38].copy_from_slice(&c.to_be_bytes());
            let pseudo = sum16(&full[12..20], 6 + (ip.len() - 20) as u64);
            assert_eq!(fold(sum16(&full[20..], pseudo)), 0xffff);
            payload.extend_from_slice(&ip[40..]);
        }
        assert_eq!(payload, &p[40..]);
        assert_eq!(segs[2].1.len(), VNET_HDR_LEN + 40 + 3000 - 2 * 1448);
    }
}
