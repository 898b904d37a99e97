//! Packet type IDs and the one table of what each type is (spec table 1.2 and
//! wire-facts "Header sizes"). Everything derived from a type — REQ or not,
//! tagged, delivery-complete, its header layout — comes from this table;
//! nothing is computed from type IDs by arithmetic.

use super::req::{layouts as l, Layout};

/// What a non-REQ type is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NonReqKind {
    /// HANDSHAKE.
    Handshake,
    /// CTS.
    Cts,
    /// CTSDATA.
    CtsData,
    /// READRSP.
    ReadRsp,
    /// EOR.
    Eor,
    /// ATOMRSP.
    AtomRsp,
    /// RECEIPT.
    Receipt,
    /// READ_NACK.
    ReadNack,
    /// PEER_ERROR.
    PeerError,
}

/// Which kind of request a REQ type starts (spec §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReqFamily {
    /// Request to message (two-sided).
    Rtm,
    /// Request to write (emulated write).
    Rtw,
    /// Request to read (emulated read).
    Rtr,
    /// Request to atomic (emulated atomic).
    Rta,
}

/// The subprotocol a REQ type belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subprotocol {
    /// Eager: the whole message in one packet.
    Eager,
    /// Medium: the message in several REQ packets.
    Medium,
    /// Long-CTS: receiver-driven flow control.
    Longcts,
    /// Long-read: the receiver reads by RDMA.
    Longread,
    /// Runting CTS (defined by libfabric, never sent).
    Runtcts,
    /// Runting read: some data eagerly, the rest by RDMA read.
    Runtread,
    /// Emulated short read (one READRSP).
    ShortRead,
    /// Emulated long-CTS read.
    LongctsRead,
    /// Emulated write atomic.
    WriteAtomic,
    /// Emulated fetch atomic.
    FetchAtomic,
    /// Emulated compare atomic.
    CompareAtomic,
}

/// Static facts about one REQ type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqInfo {
    /// RTM, RTW, RTR or RTA.
    pub family: ReqFamily,
    /// The subprotocol.
    pub proto: Subprotocol,
    /// Tagged RTM.
    pub tagged: bool,
    /// Delivery-complete variant (answered with RECEIPT).
    pub dc: bool,
    pub(crate) layout: &'static Layout,
}

/// REQ or not, with the per-type facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// A non-REQ packet.
    NonReq(NonReqKind),
    /// A REQ packet.
    Req(ReqInfo),
}

const fn req(family: ReqFamily, proto: Subprotocol, tagged: bool, dc: bool, layout: &'static Layout) -> Category {
    Category::Req(ReqInfo { family, proto, tagged, dc, layout })
}

macro_rules! packet_types {
    ($( $var:ident = $id:literal, $name:literal, $cat:expr; )*) => {
        /// Every packet type that can be on the wire (retired, internal and
        /// reserved IDs 1, 2, 6, 131 and 132 are not: they parse as unknown).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum PacketType {
            $( #[doc = $name] $var = $id, )*
        }

        impl PacketType {
            /// All wire packet types in ID order.
            pub const ALL: &'static [PacketType] = &[$(PacketType::$var),*];

            /// The type for an ID byte, if it is a wire type (one table load).
            #[inline]
            pub const fn from_u8(id: u8) -> Option<PacketType> {
                const BY_ID: [Option<PacketType>; 256] = {
                    let mut t = [None; 256];
                    $( t[$id] = Some(PacketType::$var); )*
                    t
                };
                BY_ID[id as usize]
            }

            /// The reference implementation's name (`EAGER_MSGRTM`, …).
            pub const fn name(self) -> &'static str {
                match self {
                    $( PacketType::$var => $name, )*
                }
            }

            /// REQ or not, and for REQ types the facts of the table (the
            /// source of [`CATEGORIES`]).
            const fn category_of(self) -> Category {
                use NonReqKind as N;
                use ReqFamily::*;
                use Subprotocol::*;
                match self {
                    $( PacketType::$var => $cat, )*
                }
            }
        }
    };
}

packet_types! {
    Cts = 3, "CTS", Category::NonReq(N::Cts);
    CtsData = 4, "CTSDATA", Category::NonReq(N::CtsData);
    ReadRsp = 5, "READRSP", Category::NonReq(N::ReadRsp);
    Eor = 7, "EOR", Category::NonReq(N::Eor);
    AtomRsp = 8, "ATOMRSP", Category::NonReq(N::AtomRsp);
    Handshake = 9, "HANDSHAKE", Category::NonReq(N::Handshake);
    Receipt = 10, "RECEIPT", Category::NonReq(N::Receipt);
    ReadNack = 11, "READ_NACK", Category::NonReq(N::ReadNack);
    PeerError = 12, "PEER_ERROR", Category::NonReq(N::PeerError);
    EagerMsgRtm = 64, "EAGER_MSGRTM", req(Rtm, Eager, false, false, &l::EAGER_MSGRTM);
    EagerTagRtm = 65, "EAGER_TAGRTM", req(Rtm, Eager, true, false, &l::EAGER_TAGRTM);
    MediumMsgRtm = 66, "MEDIUM_MSGRTM", req(Rtm, Medium, false, false, &l::MEDIUM_MSGRTM);
    MediumTagRtm = 67, "MEDIUM_TAGRTM", req(Rtm, Medium, true, false, &l::MEDIUM_TAGRTM);
    LongctsMsgRtm = 68, "LONGCTS_MSGRTM", req(Rtm, Longcts, false, false, &l::LONGCTS_MSGRTM);
    LongctsTagRtm = 69, "LONGCTS_TAGRTM", req(Rtm, Longcts, true, false, &l::LONGCTS_TAGRTM);
    EagerRtw = 70, "EAGER_RTW", req(Rtw, Eager, false, false, &l::EAGER_RTW);
    LongctsRtw = 71, "LONGCTS_RTW", req(Rtw, Longcts, false, false, &l::LONGCTS_RTW);
    ShortRtr = 72, "SHORT_RTR", req(Rtr, ShortRead, false, false, &l::RTR);
    LongctsRtr = 73, "LONGCTS_RTR", req(Rtr, LongctsRead, false, false, &l::RTR);
    WriteRta = 74, "WRITE_RTA", req(Rta, WriteAtomic, false, false, &l::WRITE_RTA);
    FetchRta = 75, "FETCH_RTA", req(Rta, FetchAtomic, false, false, &l::FETCH_RTA);
    CompareRta = 76, "COMPARE_RTA", req(Rta, CompareAtomic, false, false, &l::FETCH_RTA);
    LongreadMsgRtm = 128, "LONGREAD_MSGRTM", req(Rtm, Longread, false, false, &l::LONGREAD_MSGRTM);
    LongreadTagRtm = 129, "LONGREAD_TAGRTM", req(Rtm, Longread, true, false, &l::LONGREAD_TAGRTM);
    LongreadRtw = 130, "LONGREAD_RTW", req(Rtw, Longread, false, false, &l::LONGREAD_RTW);
    DcEagerMsgRtm = 133, "DC_EAGER_MSGRTM", req(Rtm, Eager, false, true, &l::DC_EAGER_MSGRTM);
    DcEagerTagRtm = 134, "DC_EAGER_TAGRTM", req(Rtm, Eager, true, true, &l::DC_EAGER_TAGRTM);
    DcMediumMsgRtm = 135, "DC_MEDIUM_MSGRTM", req(Rtm, Medium, false, true, &l::DC_MEDIUM_MSGRTM);
    DcMediumTagRtm = 136, "DC_MEDIUM_TAGRTM", req(Rtm, Medium, true, true, &l::DC_MEDIUM_TAGRTM);
    DcLongctsMsgRtm = 137, "DC_LONGCTS_MSGRTM", req(Rtm, Longcts, false, true, &l::LONGCTS_MSGRTM);
    DcLongctsTagRtm = 138, "DC_LONGCTS_TAGRTM", req(Rtm, Longcts, true, true, &l::LONGCTS_TAGRTM);
    DcEagerRtw = 139, "DC_EAGER_RTW", req(Rtw, Eager, false, true, &l::DC_EAGER_RTW);
    DcLongctsRtw = 140, "DC_LONGCTS_RTW", req(Rtw, Longcts, false, true, &l::LONGCTS_RTW);
    DcWriteRta = 141, "DC_WRITE_RTA", req(Rta, WriteAtomic, false, true, &l::DC_WRITE_RTA);
    RuntctsMsgRtm = 142, "RUNTCTS_MSGRTM", req(Rtm, Runtcts, false, false, &l::RUNTCTS_MSGRTM);
    RuntctsTagRtm = 143, "RUNTCTS_TAGRTM", req(Rtm, Runtcts, true, false, &l::RUNTCTS_TAGRTM);
    RuntctsRtw = 144, "RUNTCTS_RTW", req(Rtw, Runtcts, false, false, &l::RUNTCTS_RTW);
    RuntreadMsgRtm = 145, "RUNTREAD_MSGRTM", req(Rtm, Runtread, false, false, &l::RUNTREAD_MSGRTM);
    RuntreadTagRtm = 146, "RUNTREAD_TAGRTM", req(Rtm, Runtread, true, false, &l::RUNTREAD_TAGRTM);
    RuntreadRtw = 147, "RUNTREAD_RTW", req(Rtw, Runtread, false, false, &l::RUNTREAD_RTW);
}

/// `category_of` of every type, indexed by ID: a lookup instead of a match
/// on the hot path.
const CATEGORIES: [Option<Category>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < PacketType::ALL.len() {
        let p = PacketType::ALL[i];
        t[p as usize] = Some(p.category_of());
        i += 1;
    }
    t
};

impl PacketType {
    /// REQ or not, and for REQ types the facts of the table.
    #[inline]
    pub const fn category(self) -> Category {
        match CATEGORIES[self as usize] {
            Some(c) => c,
            // Every variant is in ALL, so its entry is filled.
            None => Category::NonReq(NonReqKind::PeerError),
        }
    }

    /// The REQ facts, or `None` for a non-REQ type.
    #[inline]
    pub const fn req_info(self) -> Option<ReqInfo> {
        match self.category() {
            Category::Req(info) => Some(info),
            Category::NonReq(_) => None,
        }
    }

    /// True for REQ types.
    pub const fn is_req(self) -> bool {
        self.req_info().is_some()
    }

    /// Looks a REQ type up by its facts; `None` when no type has them
    /// (e.g. a tagged RTW). This is how the engine names the packet to send.
    pub fn req_type(family: ReqFamily, proto: Subprotocol, tagged: bool, dc: bool) -> Option<PacketType> {
        PacketType::ALL.iter().copied().find(|t| {
            matches!(t.req_info(), Some(i) if i.family == family && i.proto == proto && i.tagged == tagged && i.dc == dc)
        })
    }

    /// The REQ flags libfabric sets for this type (MSG on every RTM, TAGGED on
    /// tagged RTMs, ATOMIC on every RTA; wire-facts #11). Zero for non-REQ.
    pub const fn default_req_flags(self) -> u16 {
        use super::req_flags::*;
        match self.req_info() {
            Some(ReqInfo { family: ReqFamily::Rtm, tagged: true, .. }) => MSG | TAGGED,
            Some(ReqInfo { family: ReqFamily::Rtm, tagged: false, .. }) => MSG,
            Some(ReqInfo { family: ReqFamily::Rta, .. }) => ATOMIC,
            Some(ReqInfo { family: ReqFamily::Rtw | ReqFamily::Rtr, .. }) | None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_reserved_ids_are_unknown() {
        for t in PacketType::ALL {
            assert_eq!(PacketType::from_u8(*t as u8), Some(*t));
        }
        for id in [0u8, 1, 2, 6, 13, 63, 77, 127, 131, 132, 148, 255] {
            assert_eq!(PacketType::from_u8(id), None, "id {id}");
        }
        assert_eq!(PacketType::ALL.len(), 9 + 13 + 3 + 9 + 6);
    }

    #[test]
    fn req_type_lookup_is_unique() {
        for t in PacketType::ALL {
            if let Some(i) = t.req_info() {
                assert_eq!(PacketType::req_type(i.family, i.proto, i.tagged, i.dc), Some(*t));
            }
        }
        assert_eq!(PacketType::req_type(ReqFamily::Rtw, Subprotocol::Eager, true, false), None);
    }
}
