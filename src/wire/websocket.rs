//! WebSocket framing the hub writes itself (RFC 6455 §5.2): final,
//! unmasked server frames, their opcodes and the close codes the hub
//! sends. Reading frames is tungstenite's (`ws`).

/// Close codes the hub sends.
pub mod close {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const UNSUPPORTED: u16 = 1003;
    pub const INVALID_PAYLOAD: u16 = 1007;
    pub const POLICY: u16 = 1008;
    pub const TOO_BIG: u16 = 1009;
    pub const SUPERSEDED: u16 = 4001;
}

/// Opcodes of the frames the hub writes itself.
pub mod opcode {
    pub const TEXT: u8 = 0x1;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
}

/// Size of the header of an unmasked server frame carrying `len` payload
/// bytes: 2, 4 or 10 bytes.
pub fn frame_header_len(len: usize) -> usize {
    match len {
        0..=125 => 2,
        126..=65535 => 4,
        _ => 10,
    }
}

/// Encodes one final, unmasked server frame.
pub fn encode_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(frame_header_len(payload.len()) + payload.len());
    push_frame_header(&mut out, opcode, payload.len());
    out.extend_from_slice(payload);
    out
}

/// Appends the header of one final, unmasked server frame whose payload
/// is `len` bytes.
pub fn push_frame_header(out: &mut Vec<u8>, opcode: u8, len: usize) {
    out.push(0x80 | opcode);
    match len {
        0..=125 => out.push(len as u8),
        126..=65535 => {
            out.push(126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
}
