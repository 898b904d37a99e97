-- Wireshark dissector for the EFA RDM protocol v4 as rdm4 captures it.
--
-- It decodes
--   * the records of an `RDM4_PCAP` capture (link type LINKTYPE_USER0, 147):
--     the 16-byte rdm4 pseudo-header (direction, device, peer's address
--     handle), then the udp device header when flag bit 0 says so, then the
--     EFA RDM packet;
--   * UDP datagrams of rdm4's udp device captured on an interface (tcpdump,
--     tshark -i): found heuristically (magic 0xD4, version 2), its 28-byte
--     header, then for DATA datagrams the EFA RDM packet;
--   * every packet type of protocol v4: HANDSHAKE (extra features and every
--     optional field), CTS, CTSDATA, READRSP, EOR, ATOMRSP, RECEIPT,
--     READ_NACK, PEER_ERROR, and every REQ type (64-76, 128-130, 133-147)
--     with its fixed fields, rma_iov[], the optional headers (raw address,
--     CQ data, connid), read_iov[] and the application data's length.
-- Layouts follow the reference implementation where the protocol document
-- differs (rdm4's src/wire, shared/facts/wire-facts.md). Malformed packets
-- (too short, old version, unknown type, lengths past the end) are flagged
-- as expert info of group "Malformed".
--
-- Use: wireshark -X lua_script:rdm4.lua capture.pcap, or copy the file into
-- a plugin directory (~/.local/lib/wireshark/plugins/, or the
-- <prefix>/lib/wireshark/plugins/ that scripts/install.sh fills).
-- Filter with rdm4.type == 65, rdm4.msg_id, rdm4.tag, rdm4.connid, ...

local rdm4 = Proto("rdm4", "EFA RDM protocol v4 (rdm4)")
local rdm4udp = Proto("rdm4udp", "rdm4 udp device")

local PSEUDO_LEN = 16
local UDP_HDR_LEN = 28
local CONNID_HDR = 0x8000

-- Packet type names (wire-facts "Header sizes").
local TYPES = {
    [3] = "CTS", [4] = "CTSDATA", [5] = "READRSP", [7] = "EOR", [8] = "ATOMRSP",
    [9] = "HANDSHAKE", [10] = "RECEIPT", [11] = "READ_NACK", [12] = "PEER_ERROR",
    [64] = "EAGER_MSGRTM", [65] = "EAGER_TAGRTM", [66] = "MEDIUM_MSGRTM", [67] = "MEDIUM_TAGRTM",
    [68] = "LONGCTS_MSGRTM", [69] = "LONGCTS_TAGRTM", [70] = "EAGER_RTW", [71] = "LONGCTS_RTW",
    [72] = "SHORT_RTR", [73] = "LONGCTS_RTR", [74] = "WRITE_RTA", [75] = "FETCH_RTA",
    [76] = "COMPARE_RTA", [128] = "LONGREAD_MSGRTM", [129] = "LONGREAD_TAGRTM",
    [130] = "LONGREAD_RTW", [133] = "DC_EAGER_MSGRTM", [134] = "DC_EAGER_TAGRTM",
    [135] = "DC_MEDIUM_MSGRTM", [136] = "DC_MEDIUM_TAGRTM", [137] = "DC_LONGCTS_MSGRTM",
    [138] = "DC_LONGCTS_TAGRTM", [139] = "DC_EAGER_RTW", [140] = "DC_LONGCTS_RTW",
    [141] = "DC_WRITE_RTA", [142] = "RUNTCTS_MSGRTM", [143] = "RUNTCTS_TAGRTM",
    [144] = "RUNTCTS_RTW", [145] = "RUNTREAD_MSGRTM", [146] = "RUNTREAD_TAGRTM",
    [147] = "RUNTREAD_RTW",
}

-- Fixed fields of each REQ layout: {name, offset}; the width comes from WIDE
-- (rdm4's src/wire/req.rs `layouts!`).
local WIDE = { tag = true, msg_length = true, seg_offset = true, runt_length = true }
local L = {
    EAGER_MSGRTM = { { "msg_id", 4 } },
    EAGER_TAGRTM = { { "msg_id", 4 }, { "tag", 8 } },
    MEDIUM_MSGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "seg_offset", 16 } },
    MEDIUM_TAGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "seg_offset", 16 }, { "tag", 24 } },
    LONGCTS_MSGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "credit_request", 20 } },
    LONGCTS_TAGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "credit_request", 20 },
        { "tag", 24 } },
    LONGREAD_MSGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "read_iov_count", 20 } },
    LONGREAD_TAGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "read_iov_count", 20 },
        { "tag", 24 } },
    DC_EAGER_MSGRTM = { { "msg_id", 4 }, { "send_id", 8 }, { "padding", 12 } },
    DC_EAGER_TAGRTM = { { "msg_id", 4 }, { "send_id", 8 }, { "padding", 12 }, { "tag", 16 } },
    DC_MEDIUM_MSGRTM = { { "msg_id", 4 }, { "send_id", 8 }, { "padding", 12 }, { "msg_length", 16 },
        { "seg_offset", 24 } },
    DC_MEDIUM_TAGRTM = { { "msg_id", 4 }, { "send_id", 8 }, { "padding", 12 }, { "msg_length", 16 },
        { "seg_offset", 24 }, { "tag", 32 } },
    RUNTCTS_MSGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "credit_request", 20 },
        { "seg_offset", 24 }, { "runt_length", 32 } },
    RUNTCTS_TAGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "credit_request", 20 },
        { "seg_offset", 24 }, { "runt_length", 32 }, { "tag", 40 } },
    RUNTREAD_MSGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "read_iov_count", 20 },
        { "seg_offset", 24 }, { "runt_length", 32 } },
    RUNTREAD_TAGRTM = { { "msg_id", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "read_iov_count", 20 },
        { "seg_offset", 24 }, { "runt_length", 32 }, { "tag", 40 } },
    EAGER_RTW = { { "rma_iov_count", 4 } },
    DC_EAGER_RTW = { { "rma_iov_count", 4 }, { "send_id", 8 }, { "padding", 12 } },
    LONGCTS_RTW = { { "rma_iov_count", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "credit_request", 20 } },
    LONGREAD_RTW = { { "rma_iov_count", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "read_iov_count", 20 } },
    RUNTCTS_RTW = { { "rma_iov_count", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "credit_request", 20 },
        { "seg_offset", 24 }, { "runt_length", 32 } },
    RUNTREAD_RTW = { { "rma_iov_count", 4 }, { "msg_length", 8 }, { "send_id", 16 }, { "read_iov_count", 20 },
        { "seg_offset", 24 }, { "runt_length", 32 } },
    RTR = { { "rma_iov_count", 4 }, { "msg_length", 8 }, { "recv_id", 16 }, { "recv_length", 20 } },
    WRITE_RTA = { { "msg_id", 4 }, { "rma_iov_count", 8 }, { "atomic_datatype", 12 }, { "atomic_op", 16 },
        { "padding", 20 } },
    FETCH_RTA = { { "msg_id", 4 }, { "rma_iov_count", 8 }, { "atomic_datatype", 12 }, { "atomic_op", 16 },
        { "recv_id", 20 } },
    DC_WRITE_RTA = { { "msg_id", 4 }, { "rma_iov_count", 8 }, { "atomic_datatype", 12 }, { "atomic_op", 16 },
        { "send_id", 20 } },
}
-- The layout of each REQ type (types sharing a struct share a layout).
local REQ_LAYOUT = {
    [64] = L.EAGER_MSGRTM, [65] = L.EAGER_TAGRTM, [66] = L.MEDIUM_MSGRTM, [67] = L.MEDIUM_TAGRTM,
    [68] = L.LONGCTS_MSGRTM, [69] = L.LONGCTS_TAGRTM, [70] = L.EAGER_RTW, [71] = L.LONGCTS_RTW,
    [72] = L.RTR, [73] = L.RTR, [74] = L.WRITE_RTA, [75] = L.FETCH_RTA, [76] = L.FETCH_RTA,
    [128] = L.LONGREAD_MSGRTM, [129] = L.LONGREAD_TAGRTM, [130] = L.LONGREAD_RTW,
    [133] = L.DC_EAGER_MSGRTM, [134] = L.DC_EAGER_TAGRTM, [135] = L.DC_MEDIUM_MSGRTM,
    [136] = L.DC_MEDIUM_TAGRTM, [137] = L.LONGCTS_MSGRTM, [138] = L.LONGCTS_TAGRTM,
    [139] = L.DC_EAGER_RTW, [140] = L.LONGCTS_RTW, [141] = L.DC_WRITE_RTA,
    [142] = L.RUNTCTS_MSGRTM, [143] = L.RUNTCTS_TAGRTM, [144] = L.RUNTCTS_RTW,
    [145] = L.RUNTREAD_MSGRTM, [146] = L.RUNTREAD_TAGRTM, [147] = L.RUNTREAD_RTW,
}

local DIRECTIONS = { [0] = "sent", [1] = "received" }
local DEVICES = { [0] = "shm", [1] = "udp", [2] = "sim", [3] = "auto (sender not in the address vector)" }
local UDP_KINDS = { [1] = "DATA", [2] = "ACK", [3] = "CLOSE", [4] = "WRITE", [5] = "READ_REQ",
    [6] = "READ_RSP", [7] = "RDMA_DONE", [8] = "WRITE_IMM", [9] = "PROBE",
    [10] = "WHO", [11] = "NAME" }
local REF_KINDS = { [0] = "OPE_INDEX", [1] = "MSG_ID", [2] = "MSG_ID_SKIP" }
local FI_DATATYPES = { [0] = "FI_INT8", "FI_UINT8", "FI_INT16", "FI_UINT16", "FI_INT32", "FI_UINT32",
    "FI_INT64", "FI_UINT64", "FI_FLOAT", "FI_DOUBLE", "FI_FLOAT_COMPLEX", "FI_DOUBLE_COMPLEX",
    "FI_LONG_DOUBLE", "FI_LONG_DOUBLE_COMPLEX", "FI_INT128", "FI_UINT128" }
local FI_OPS = { [0] = "FI_MIN", "FI_MAX", "FI_SUM", "FI_PROD", "FI_LOR", "FI_LAND", "FI_BOR", "FI_BAND",
    "FI_LXOR", "FI_BXOR", "FI_ATOMIC_READ", "FI_ATOMIC_WRITE", "FI_CSWAP", "FI_CSWAP_NE", "FI_CSWAP_LE",
    "FI_CSWAP_LT", "FI_CSWAP_GE", "FI_CSWAP_GT", "FI_MSWAP" }

local f = {}
local function field(name, ctor, ...)
    f[name] = ctor("rdm4." .. name, ...)
end
local U32, U64, U16, U8 = ProtoField.uint32, ProtoField.uint64, ProtoField.uint16, ProtoField.uint8

-- The pseudo-header.
field("pcap.version", U8, "Pseudo-header version")
field("pcap.direction", U8, "Direction", base.DEC, DIRECTIONS)
field("pcap.device", U8, "Device", base.DEC, DEVICES)
field("pcap.flags", U8, "Pseudo-header flags", base.HEX)
field("pcap.udp_hdr", ProtoField.bool, "udp device header follows", 8, nil, 0x1)
field("pcap.peer", U32, "Peer address handle (0xffffffff: unknown sender)")
-- The udp device header.
field("udp.magic", U8, "Magic", base.HEX)
field("udp.version", U8, "Version")
field("udp.kind", U8, "Kind", base.DEC, UDP_KINDS)
field("udp.flags", U8, "Flags", base.HEX)
field("udp.hold", ProtoField.bool, "HOLD (no new message)", 8, nil, 0x1)
field("udp.retx", ProtoField.bool, "RETX (sent again on a timeout)", 8, nil, 0x2)
field("udp.dup", ProtoField.bool, "DUP (a RETX datagram arrived twice)", 8, nil, 0x4)
field("udp.src_connid", U32, "Sender's connid", base.HEX)
field("udp.dst_connid", U32, "Receiver's connid", base.HEX)
field("udp.seq", U32, "Sequence")
field("udp.ack", U32, "First sequence not received")
field("udp.ack_bits", U32, "Received after ack (bit i: ack+1+i)", base.HEX)
field("udp.window", U32, "Window (bytes)")
field("udp.body", ProtoField.bytes, "Device message")
-- The base header and the REQ flags.
field("type", U8, "Type", base.DEC, TYPES)
field("version", U8, "Version")
field("flags", U16, "Flags", base.HEX)
-- The flag bits each family of types gives a meaning (wire-facts "Flags and
-- constants"), shown under rdm4.flags as rdm4.flags.<name>.
local FLAG_BITS = {
    any = { { "connid_hdr", 0x8000 } },
    req = { { "raw_addr_hdr", 0x1 }, { "cq_data_hdr", 0x2 }, { "msg", 0x4 }, { "tagged", 0x8 }, { "rma", 0x10 },
        { "atomic", 0x20 }, { "read_nack", 0x2000 } },
    cts = { { "cts_read_req", 0x80 } },
    handshake = { { "host_id", 0x1 }, { "device_version", 0x2 }, { "user_recv_qp", 0x4 }, { "hmem_p2p", 0x8 } },
}
for _, bits in pairs(FLAG_BITS) do
    for _, b in ipairs(bits) do
        field("flags." .. b[1], ProtoField.bool, b[1]:upper(), 16, nil, b[2])
    end
end
-- Fields of one or more types.
field("msg_id", U32, "msg_id")
field("tag", U64, "tag", base.HEX)
field("msg_length", U64, "msg_length")
field("seg_offset", U64, "seg_offset")
field("seg_length", U64, "seg_length")
field("send_id", U32, "send_id")
field("recv_id", U32, "recv_id")
field("credit_request", U32, "credit_request")
field("recv_length", U64, "recv_length")
field("runt_length", U64, "runt_length")
field("atomic_datatype", U32, "atomic_datatype", base.DEC, FI_DATATYPES)
field("atomic_op", U32, "atomic_op", base.DEC, FI_OPS)
field("padding", U32, "padding", base.HEX)
field("reserved", U32, "reserved", base.HEX)
field("rma_iov_count", U32, "rma_iov_count")
field("read_iov_count", U32, "read_iov_count")
field("rma_iov", ProtoField.none, "rma_iov")
field("read_iov", ProtoField.none, "read_iov")
field("iov.addr", U64, "addr", base.HEX)
field("iov.len", U64, "len")
field("iov.key", U64, "key", base.HEX)
field("connid", U32, "connid", base.HEX)
field("cq_data", U64, "cq_data", base.HEX)
field("raw_addr", ProtoField.none, "Raw address header")
field("raw_addr.size", U32, "size")
field("raw_addr.gid", ProtoField.ipv6, "gid")
field("raw_addr.qpn", U16, "qpn")
field("raw_addr.pad", U16, "pad", base.HEX)
field("raw_addr.connid", U32, "connid (qkey)", base.HEX)
field("raw_addr.reserved", U64, "reserved", base.HEX)
field("op_id", U32, "op_id")
field("ref_kind", U32, "ref_kind", base.DEC, REF_KINDS)
field("prov_errno", U32, "prov_errno")
field("nextra_p3", U32, "nextra_p3")
field("extra_info", U64, "extra_info", base.HEX)
field("host_id", U64, "host_id", base.HEX)
field("device_version", U32, "device_version", base.HEX)
field("user_recv_qp.qpn", U32, "user recv QP qpn")
field("user_recv_qp.qkey", U32, "user recv QP qkey", base.HEX)
field("p2p_supported", U8, "p2p_supported")
field("data_length", U32, "Application data length")
field("data", ProtoField.bytes, "Application data")
-- The extra feature and request bits of extra_info[0].
local FEATURES = { "rdma_read", "delivery_complete", "constant_header_length", "connid_header", "runt",
    "rdma_write", "read_nack", "user_recv_qp", "unsolicited_write_recv", "peer_error" }
for i, name in ipairs(FEATURES) do
    field("extra." .. name, ProtoField.bool, name:upper(), 64, nil, 2 ^ (i - 1))
end

local ef_malformed = ProtoExpert.new("rdm4.malformed", "Malformed rdm4 packet", expert.group.MALFORMED,
    expert.severity.ERROR)
local ef_segment = ProtoExpert.new("rdm4.segment_outside", "Segment outside the message",
    expert.group.PROTOCOL, expert.severity.WARN)

local fields = {}
for _, v in pairs(f) do
    fields[#fields + 1] = v
end
rdm4.fields = fields
rdm4.experts = { ef_malformed, ef_segment }

-- Raised to end a dissection at a malformed spot: {item, text}.
local Malformed = {}

local function malformed(tree, text)
    error(setmetatable({ tree = tree, text = text }, Malformed))
end

-- The `len` bytes at `off` of `tvb`, or a malformed-packet error naming `what`.
local function need(tvb, tree, off, len, what)
    if off + len > tvb:len() then
        malformed(tree, string.format("%s: needs %d bytes at offset %d, the packet has %d", what, len, off,
            tvb:len()))
    end
    return tvb(off, len)
end

local function add_u32(tree, fld, tvb, off, what)
    local r = need(tvb, tree, off, 4, what)
    tree:add_le(fld, r)
    return r:le_uint()
end

local function add_u64(tree, fld, tvb, off, what)
    local r = need(tvb, tree, off, 8, what)
    tree:add_le(fld, r)
    return r:le_uint64()
end

-- The multiuse slot at `off`: the connid with CONNID_HDR, else padding.
local function multiuse(tree, tvb, off, flags)
    if bit.band(flags, CONNID_HDR) ~= 0 then
        return add_u32(tree, f.connid, tvb, off, "connid")
    end
    add_u32(tree, f.padding, tvb, off, "padding")
end

-- `count` efa_rma_iov entries at `off` under a subtree; returns the end.
local function iovs(tree, fld, tvb, off, count, what)
    local total = need(tvb, tree, off, 24 * count, what)
    if count == 0 then
        return off
    end
    local sub = tree:add(fld, total)
    for i = 0, count - 1 do
        local at = off + 24 * i
        local e = sub:add(fld, tvb(at, 24)):set_text(string.format("%s[%d]", what, i))
        e:add_le(f["iov.addr"], tvb(at, 8))
        e:add_le(f["iov.len"], tvb(at + 8, 8))
        e:add_le(f["iov.key"], tvb(at + 16, 8))
    end
    return off + 24 * count
end

-- Application data from `off` to the end (or `len` bytes); returns its length.
local function data(tree, tvb, off, len)
    len = len or (tvb:len() - off)
    need(tvb, tree, off, len, "application data")
    tree:add(f.data_length, len):set_generated()
    if len > 0 then
        tree:add(f.data, tvb(off, len))
    end
    return len
end

-- The base header's flags with the bits that the type gives a meaning.
local function add_flags(tree, tvb, ptype)
    local r = tvb(2, 2)
    local ft = tree:add_le(f.flags, r)
    local family = REQ_LAYOUT[ptype] and "req" or (ptype == 3 and "cts") or (ptype == 9 and "handshake")
    for _, bits in ipairs({ FLAG_BITS.any, FLAG_BITS[family] or {} }) do
        for _, b in ipairs(bits) do
            ft:add_le(f["flags." .. b[1]], r)
        end
    end
    return r:le_uint()
end

local function dissect_req(tvb, tree, ptype, flags, info)
    local layout = REQ_LAYOUT[ptype]
    local v, fixed_len = {}, 4
    for _, fl in ipairs(layout) do
        local name, off = fl[1], fl[2]
        local width = WIDE[name] and 8 or 4
        local r = need(tvb, tree, off, width, name)
        if name == "recv_length" then
            tree:add(f.recv_length, r, UInt64(r:le_uint()))
            v[name] = r:le_uint()
        else
            tree:add_le(f[name], r)
            v[name] = width == 8 and r:le_uint64() or r:le_uint()
        end
        fixed_len = math.max(fixed_len, off + width)
    end
    local pos = iovs(tree, f.rma_iov, tvb, fixed_len, v.rma_iov_count or 0, "rma_iov")
    if bit.band(flags, 0x1) ~= 0 then
        local size = need(tvb, tree, pos, 4, "raw address header size"):le_uint()
        local hdr = need(tvb, tree, pos, 4 + size, "raw address header")
        local sub = tree:add(f.raw_addr, hdr)
        sub:add_le(f["raw_addr.size"], tvb(pos, 4))
        if size < 32 then
            malformed(sub, string.format("raw address header of %d bytes (at least 32)", size))
        end
        sub:add(f["raw_addr.gid"], tvb(pos + 4, 16))
        sub:add_le(f["raw_addr.qpn"], tvb(pos + 20, 2))
        sub:add_le(f["raw_addr.pad"], tvb(pos + 22, 2))
        sub:add_le(f["raw_addr.connid"], tvb(pos + 24, 4))
        sub:add_le(f["raw_addr.reserved"], tvb(pos + 28, 8))
        pos = pos + 4 + size
    end
    if bit.band(flags, 0x2) ~= 0 then
        add_u64(tree, f.cq_data, tvb, pos, "CQ data header")
        pos = pos + 8
    end
    if bit.band(flags, CONNID_HDR) ~= 0 then
        add_u32(tree, f.connid, tvb, pos, "connid header")
        pos = pos + 4
    end
    pos = iovs(tree, f.read_iov, tvb, pos, v.read_iov_count or 0, "read_iov")
    local len = data(tree, tvb, pos)
    if v.seg_offset and v.msg_length and v.seg_offset + len > v.msg_length then
        tree:add_proto_expert_info(ef_segment)
    end
    for _, k in ipairs({ "msg_id", "tag", "msg_length", "seg_offset", "send_id", "recv_id" }) do
        if v[k] then
            info[#info + 1] = string.format(k == "tag" and "%s=0x%s" or "%s=%s", k,
                k == "tag" and v[k]:tohex() or tostring(v[k]))
        end
    end
end

-- HANDSHAKE: extra_info words, then the optional 8-byte blocks in order.
local function dissect_handshake(tvb, tree, flags, info)
    local n = add_u32(tree, f.nextra_p3, tvb, 4, "nextra_p3")
    if n < 3 then
        malformed(tree, string.format("nextra_p3 %d (at least 3)", n))
    end
    local pos = 8
    for i = 0, n - 4 do
        local r = need(tvb, tree, pos, 8, "extra_info")
        local item = tree:add_le(f.extra_info, r)
        if i == 0 then
            for _, name in ipairs(FEATURES) do
                item:add_le(f["extra." .. name], r)
            end
        end
        pos = pos + 8
    end
    if bit.band(flags, CONNID_HDR) ~= 0 then
        add_u32(tree, f.connid, tvb, pos, "connid")
        pos = pos + 8
    end
    if bit.band(flags, 0x1) ~= 0 then
        add_u64(tree, f.host_id, tvb, pos, "host_id")
        pos = pos + 8
    end
    if bit.band(flags, 0x2) ~= 0 then
        add_u32(tree, f.device_version, tvb, pos, "device_version")
        pos = pos + 8
    end
    if bit.band(flags, 0x4) ~= 0 then
        add_u32(tree, f["user_recv_qp.qpn"], tvb, pos, "user recv QP")
        add_u32(tree, f["user_recv_qp.qkey"], tvb, pos + 4, "user recv QP")
        pos = pos + 8
    end
    if bit.band(flags, 0x8) ~= 0 then
        need(tvb, tree, pos, 8, "p2p_supported")
        tree:add(f.p2p_supported, tvb(pos, 1))
    end
    info[#info + 1] = string.format("features=%d", n - 3)
end

-- Non-REQ types (wire-facts "Header sizes"; rdm4's src/wire/nonreq.rs).
local function dissect_nonreq(tvb, tree, ptype, flags, info)
    local function ids(first, second, off)
        local a = add_u32(tree, f[first], tvb, off, first)
        local b = add_u32(tree, f[second], tvb, off + 4, second)
        info[#info + 1] = string.format("%s=%d %s=%d", first, a, second, b)
    end
    local function seg_data(off)
        local len = add_u64(tree, f.seg_length, tvb, off, "seg_length")
        return len
    end
    if ptype == 3 then -- CTS
        multiuse(tree, tvb, 4, flags)
        ids("send_id", "recv_id", 8)
        add_u64(tree, f.recv_length, tvb, 16, "recv_length")
    elseif ptype == 4 then -- CTSDATA
        add_u32(tree, f.recv_id, tvb, 4, "recv_id")
        local len = seg_data(8)
        local off = add_u64(tree, f.seg_offset, tvb, 16, "seg_offset")
        local pos = 24
        if bit.band(flags, CONNID_HDR) ~= 0 then
            add_u32(tree, f.connid, tvb, 24, "connid block")
            need(tvb, tree, 24, 8, "connid block")
            pos = 32
        end
        data(tree, tvb, pos, len:tonumber())
        info[#info + 1] = string.format("seg_offset=%s seg_length=%s", tostring(off), tostring(len))
    elseif ptype == 5 then -- READRSP: recv_id then send_id (wire-facts #1)
        multiuse(tree, tvb, 4, flags)
        ids("recv_id", "send_id", 8)
        data(tree, tvb, 24, seg_data(16):tonumber())
    elseif ptype == 7 or ptype == 11 then -- EOR, READ_NACK
        ids("send_id", "recv_id", 4)
        multiuse(tree, tvb, 12, flags)
    elseif ptype == 8 then -- ATOMRSP
        multiuse(tree, tvb, 4, flags)
        add_u32(tree, f.reserved, tvb, 8, "reserved")
        add_u32(tree, f.recv_id, tvb, 12, "recv_id")
        data(tree, tvb, 24, seg_data(16):tonumber())
    elseif ptype == 10 then -- RECEIPT
        ids("send_id", "msg_id", 4)
        multiuse(tree, tvb, 12, flags)
    elseif ptype == 12 then -- PEER_ERROR
        add_u32(tree, f.op_id, tvb, 4, "op_id")
        add_u32(tree, f.ref_kind, tvb, 8, "ref_kind")
        add_u32(tree, f.prov_errno, tvb, 12, "prov_errno")
        multiuse(tree, tvb, 16, flags)
    elseif ptype == 9 then
        dissect_handshake(tvb, tree, flags, info)
    end
end

-- One EFA RDM packet: the whole of `tvb`. Returns the summary for the Info column.
local function dissect_packet(tvb, pinfo, root)
    local tree = root:add(rdm4, tvb())
    local info = {}
    local ok, err = pcall(function()
        local ptype = need(tvb, tree, 0, 1, "base header"):uint()
        need(tvb, tree, 0, 4, "base header")
        tree:add(f.type, tvb(0, 1))
        local version = tvb(1, 1):uint()
        tree:add(f.version, tvb(1, 1))
        local flags = add_flags(tree, tvb, ptype)
        local name = TYPES[ptype]
        info[1] = name or string.format("type %d", ptype)
        tree:append_text(": " .. info[1])
        if version < 4 then
            malformed(tree, string.format("protocol version %d (rdm4 speaks 4)", version))
        end
        if not name then
            malformed(tree, string.format("unknown packet type %d", ptype))
        end
        if REQ_LAYOUT[ptype] then
            dissect_req(tvb, tree, ptype, flags, info)
        else
            dissect_nonreq(tvb, tree, ptype, flags, info)
        end
    end)
    if not ok then
        if getmetatable(err) ~= Malformed then
            error(err, 0)
        end
        err.tree:add_proto_expert_info(ef_malformed, err.text)
        info[#info + 1] = "[Malformed: " .. err.text .. "]"
    end
    return table.concat(info, " ")
end

-- The udp device header at the start of `tvb`; returns its kind.
local function dissect_udp_hdr(tvb, root)
    local h = root:add(rdm4udp, tvb(0, UDP_HDR_LEN))
    h:add(f["udp.magic"], tvb(0, 1))
    h:add(f["udp.version"], tvb(1, 1))
    h:add(f["udp.kind"], tvb(2, 1))
    local fl = h:add(f["udp.flags"], tvb(3, 1))
    fl:add(f["udp.hold"], tvb(3, 1))
    fl:add(f["udp.retx"], tvb(3, 1))
    fl:add(f["udp.dup"], tvb(3, 1))
    h:add_le(f["udp.src_connid"], tvb(4, 4))
    h:add_le(f["udp.dst_connid"], tvb(8, 4))
    h:add_le(f["udp.seq"], tvb(12, 4))
    h:add_le(f["udp.ack"], tvb(16, 4))
    h:add_le(f["udp.ack_bits"], tvb(20, 4))
    h:add_le(f["udp.window"], tvb(24, 4))
    local kind = tvb(2, 1):uint()
    h:append_text(": " .. (UDP_KINDS[kind] or "?") .. " seq " .. tvb(12, 4):le_uint() .. " ack " ..
        tvb(16, 4):le_uint())
    return kind, h
end

-- A udp device datagram: its header, then the EFA packet of a DATA one.
local function dissect_datagram(tvb, pinfo, root)
    if tvb:len() < UDP_HDR_LEN then
        root:add_proto_expert_info(ef_malformed, "udp device datagram shorter than its 28-byte header")
        return "[Malformed udp device header]"
    end
    local kind, h = dissect_udp_hdr(tvb, root)
    local rest = tvb:len() - UDP_HDR_LEN
    if kind == 1 then
        if rest == 0 then
            h:add_proto_expert_info(ef_malformed, "DATA datagram without a packet")
            return "DATA [Malformed: empty]"
        end
        return dissect_packet(tvb(UDP_HDR_LEN):tvb(), pinfo, root)
    end
    if rest > 0 then
        h:add(f["udp.body"], tvb(UDP_HDR_LEN))
    end
    return "udp " .. (UDP_KINDS[kind] or string.format("kind %d", kind))
end

-- A record of an RDM4_PCAP capture.
function rdm4.dissector(tvb, pinfo, root)
    pinfo.cols.protocol = "RDM4"
    if tvb:len() < PSEUDO_LEN or tvb(0, 4):string() ~= "RDM4" then
        root:add_proto_expert_info(ef_malformed, "no rdm4 pseudo-header")
        return
    end
    local p = root:add(rdm4, tvb(0, PSEUDO_LEN), "rdm4 capture pseudo-header")
    p:add(f["pcap.version"], tvb(4, 1))
    p:add(f["pcap.direction"], tvb(5, 1))
    p:add(f["pcap.device"], tvb(6, 1))
    p:add(f["pcap.flags"], tvb(7, 1)):add(f["pcap.udp_hdr"], tvb(7, 1))
    p:add_le(f["pcap.peer"], tvb(8, 4))
    local dir = DIRECTIONS[tvb(5, 1):uint()] or "?"
    local peer = tvb(8, 4):le_uint()
    local who = peer == 0xffffffff and "unknown sender" or ("peer " .. peer)
    local pkt = tvb(PSEUDO_LEN):tvb()
    local summary
    if bit.band(tvb(7, 1):uint(), 1) ~= 0 then
        summary = dissect_datagram(pkt, pinfo, root)
    else
        summary = dissect_packet(pkt, pinfo, root)
    end
    pinfo.cols.info = string.format("%s %s %s: %s", DEVICES[tvb(6, 1):uint()] or "?", dir,
        dir == "sent" and ("to " .. who) or ("from " .. who), summary)
end

-- UDP datagrams of the udp device, recognised by magic and version.
local function heuristic(tvb, pinfo, root)
    if tvb:len() < UDP_HDR_LEN or tvb(0, 1):uint() ~= 0xD4 or tvb(1, 1):uint() ~= 2 then
        return false
    end
    local kind = tvb(2, 1):uint()
    if not UDP_KINDS[kind] then
        return false
    end
    pinfo.cols.protocol = "RDM4"
    pinfo.cols.info = dissect_datagram(tvb, pinfo, root)
    return true
end

local USER0 = (wtap_encaps or wtap).USER0
DissectorTable.get("wtap_encap"):add(USER0, rdm4)
rdm4udp:register_heuristic("udp", heuristic)
