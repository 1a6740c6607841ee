//! Bounds on an untrusted PyTorch file, checked before Burn's reader sees it.
//!
//! burn-store 0.21's pickle reader copies a memoised object each time the pickle refers to it
//! again and builds nested objects without a depth limit, so a 1.4 KB pickle of 64 levels of
//! shared references asks for 2⁶⁴ copies (it filled 8 GB in 13 s), and a 2 MB pickle of a million
//! nested lists overflows the stack; Burn 0.22 bounds its reader, arbor stays on 0.21. So
//! [`check_pytorch_file`] walks the pickle program first, without building anything: it follows
//! every opcode's stack effect with, for each value, only the bytes that Burn's reader would
//! allocate for it (a copy for each memo reference) and its nesting depth, in a loop with an
//! explicit stack, and refuses the file as soon as one of [`PickleLimits`] is passed, naming the
//! limit and the byte offset. Files within the limits go on to Burn's reader unchanged.
//!
//! Written here rather than taken from a crate: the pickle crates (serde-pickle and others)
//! build the objects, which is what must not happen before the bounds are known.

use std::io::Read;
use std::path::Path;

use crate::error::ConvertError;

/// The bounds [`check_pytorch_file`] enforces. The defaults are far above any state dict
/// (a pickle holds tensor metadata only: names, shapes, storage keys; the tensors' bytes are
/// stored beside it) and far below what would hurt the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PickleLimits {
    /// Size of the pickle program itself (`data.pkl`, or the pickles of a legacy file).
    pub max_pickle_bytes: u64,
    /// Bytes the reader would allocate for the objects, every memo reference counted as the
    /// copy Burn's reader makes of it.
    pub max_object_bytes: u64,
    /// Nesting depth of containers (lists, tuples, dicts, call arguments).
    pub max_depth: u32,
}

impl Default for PickleLimits {
    fn default() -> Self {
        Self {
            max_pickle_bytes: 256 << 20,
            max_object_bytes: 1 << 30,
            max_depth: 256,
        }
    }
}

/// Bytes counted for any value besides its payload (an `Object` of Burn's reader is a few
/// machine words).
const OBJECT_BYTES: u64 = 32;

/// The pickles a legacy (PyTorch ≤ 1.5) file starts with: magic number, protocol version,
/// system info, the object, the storage keys; the storages' raw bytes follow.
const LEGACY_PICKLES: usize = 5;

/// Checks the pickle(s) of the PyTorch file at `path` (a `torch.save` zip archive, a legacy
/// file, the oldest tar format, or a bare pickle) against `limits`.
///
/// # Errors
/// A [`ConvertError`] naming the file, the limit passed (and how to raise it) or the malformed
/// opcode, with its byte offset.
pub fn check_pytorch_file(path: &Path, limits: &PickleLimits) -> Result<(), ConvertError> {
    let file = std::fs::File::open(path).map_err(|e| ConvertError::file(path, e))?;
    if let Ok(mut archive) = zip::ZipArchive::new(std::io::BufReader::new(file)) {
        let name = (0..archive.len())
            .filter_map(|i| archive.name_for_index(i).map(str::to_string))
            .find(|n| n.ends_with("data.pkl"));
        let Some(name) = name else {
            // Burn's reader reports the missing data.pkl.
            return Ok(());
        };
        let entry = archive
            .by_name(&name)
            .map_err(|e| ConvertError::file(path, format!("{name}: {e}")))?;
        let size = entry.size();
        return check_member(path, &name, size, entry, limits);
    }
    if is_tar(path) {
        return check_tar(path, limits);
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limits.max_pickle_bytes).read_to_end(&mut bytes))
        .map_err(|e| ConvertError::file(path, e))?;
    // A legacy file is several pickles in a row, then raw storage bytes; a bare pickle is one.
    // Scanning stops after the pickles, so the storages are never read as opcodes.
    let pickles = if is_legacy(&bytes) { LEGACY_PICKLES } else { 1 };
    match scan(&bytes, pickles, limits) {
        Ok(_) => Ok(()),
        // The first `max_pickle_bytes` of a large legacy file did not hold its pickles.
        Err(ScanError::Truncated { .. }) if bytes.len() as u64 == limits.max_pickle_bytes => Err(
            too_big(path, "its pickles", limits.max_pickle_bytes + 1, limits),
        ),
        Err(e) => Err(ConvertError::file(path, e.to_string())),
    }
}

/// Whether `path` is a tar archive (`ustar` at byte 257), the format of the oldest `torch.save`.
fn is_tar(path: &Path) -> bool {
    let mut header = [0u8; 262];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok_and(|()| &header[257..262] == b"ustar")
}

/// Checks the two pickles of a tar-format file (`sys_info` and `pickle`; the third member,
/// `storages`, holds raw tensor bytes).
fn check_tar(path: &Path, limits: &PickleLimits) -> Result<(), ConvertError> {
    let file = std::fs::File::open(path).map_err(|e| ConvertError::file(path, e))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    let entries = archive.entries().map_err(|e| ConvertError::file(path, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ConvertError::file(path, e))?;
        let name = entry
            .path()
            .map(|p| p.to_string_lossy().trim_start_matches("./").to_string())
            .unwrap_or_default();
        if name == "pickle" || name == "sys_info" {
            let size = entry.size();
            check_member(path, &name, size, entry, limits)?;
        }
    }
    Ok(())
}

/// Walks the archive member `name` of `path`, one pickle declaring `size` bytes, read no
/// further than the limit (a declared size can lie).
fn check_member(
    path: &Path,
    name: &str,
    size: u64,
    member: impl Read,
    limits: &PickleLimits,
) -> Result<(), ConvertError> {
    if size > limits.max_pickle_bytes {
        return Err(too_big(path, name, size, limits));
    }
    let mut bytes = Vec::new();
    member
        .take(limits.max_pickle_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ConvertError::file(path, format!("{name}: {e}")))?;
    if bytes.len() as u64 > limits.max_pickle_bytes {
        return Err(too_big(path, name, bytes.len() as u64, limits));
    }
    scan(&bytes, 1, limits)
        .map(|_| ())
        .map_err(|e| ConvertError::file(path, format!("{name}: {e}")))
}

fn too_big(path: &Path, what: &str, size: u64, limits: &PickleLimits) -> ConvertError {
    ConvertError::file(
        path,
        format!(
            "{what} is {size} bytes or more, over the limit of {} bytes on a PyTorch pickle \
             (PickleLimits::max_pickle_bytes, --max-pickle-mib)",
            limits.max_pickle_bytes
        ),
    )
}

/// Whether `bytes` starts like a legacy `torch.save` file: protocol 2, then the magic number
/// 0x1950a86a20f9469cfc6c as a LONG1.
fn is_legacy(bytes: &[u8]) -> bool {
    const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
    bytes.len() >= 14
        && bytes[0] == 0x80
        && bytes[2] == 0x8a
        && bytes[3] == 10
        && bytes[4..14] == MAGIC
}

/// Why a pickle was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScanError {
    /// The program ends before its `STOP`.
    #[error("the pickle ends at byte {at} before its STOP opcode (truncated)")]
    Truncated {
        /// Offset of the end.
        at: usize,
    },
    /// An opcode this scanner does not know (nor does any pickle protocol up to 5).
    #[error("unknown pickle opcode 0x{op:02x} at byte {at}")]
    UnknownOpcode {
        /// The opcode.
        op: u8,
        /// Its offset.
        at: usize,
    },
    /// An opcode found the stack or the memo without what it needs.
    #[error("malformed pickle at byte {at}: {what}")]
    Malformed {
        /// Offset of the opcode.
        at: usize,
        /// What was missing.
        what: &'static str,
    },
    /// The objects would take more than the limit.
    #[error(
        "the pickle would make the reader allocate more than {limit} bytes (at byte {at}; \
         memo references are copied, so a small file can ask for any amount): refused \
         (PickleLimits::max_object_bytes, --max-object-mib)"
    )]
    TooLarge {
        /// Offset where the limit was passed.
        at: usize,
        /// The limit.
        limit: u64,
    },
    /// Containers nested deeper than the limit.
    #[error(
        "the pickle nests containers more than {limit} deep (at byte {at}): refused \
         (PickleLimits::max_depth, --max-depth)"
    )]
    TooDeep {
        /// Offset where the limit was passed.
        at: usize,
        /// The limit.
        limit: u32,
    },
}

/// What the scanner knows of a value: the bytes the reader would allocate for it and its depth.
#[derive(Debug, Clone, Copy, Default)]
struct Value {
    bytes: u64,
    depth: u32,
}

/// The scanner's machine: the value stack, the mark stack (stack lengths at each MARK) and the
/// memo, as Burn's reader keeps them.
struct Machine<'l> {
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: std::collections::HashMap<u64, Value>,
    /// Bytes allocated so far over the whole program.
    total: u64,
    limits: &'l PickleLimits,
    at: usize,
}

impl Machine<'_> {
    fn malformed(&self, what: &'static str) -> ScanError {
        ScanError::Malformed { at: self.at, what }
    }

    /// Counts `bytes` as allocated now, refusing past the limit.
    fn allocate(&mut self, bytes: u64) -> Result<(), ScanError> {
        self.total = self.total.saturating_add(bytes);
        if self.total > self.limits.max_object_bytes {
            return Err(ScanError::TooLarge {
                at: self.at,
                limit: self.limits.max_object_bytes,
            });
        }
        Ok(())
    }

    /// Pushes `v`, of which `allocated` bytes are new (the rest moved from popped values).
    fn push_with(&mut self, v: Value, allocated: u64) -> Result<(), ScanError> {
        self.allocate(allocated)?;
        if v.depth > self.limits.max_depth {
            return Err(ScanError::TooDeep {
                at: self.at,
                limit: self.limits.max_depth,
            });
        }
        self.stack.push(v);
        Ok(())
    }

    /// Pushes a new value or a copy: all of its bytes are allocated now.
    fn push(&mut self, v: Value) -> Result<(), ScanError> {
        self.push_with(v, v.bytes)
    }

    /// Pushes a container made of popped values: only its own header is new.
    fn push_container(&mut self, v: Value) -> Result<(), ScanError> {
        self.push_with(v, OBJECT_BYTES)
    }

    fn scalar(&mut self, payload: u64) -> Result<(), ScanError> {
        self.push(Value {
            bytes: OBJECT_BYTES + payload,
            depth: 0,
        })
    }

    fn pop(&mut self) -> Result<Value, ScanError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(self.malformed("a value popped across a MARK"));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed("a value popped from an empty stack"))
    }

    /// Pops everything down to the last MARK, folded into one container value.
    fn pop_mark(&mut self) -> Result<Value, ScanError> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed("no MARK to pop to"))?;
        if mark > self.stack.len() {
            return Err(self.malformed("a MARK above the stack"));
        }
        let items = self.stack.split_off(mark);
        Ok(fold(items.iter()))
    }

    /// Moves `items` (already counted) into the object on top of the stack.
    fn add_to_top(&mut self, items: Value) -> Result<(), ScanError> {
        let top = self.pop()?;
        self.push_with(
            Value {
                bytes: top.bytes.saturating_add(items.bytes),
                depth: top.depth.max(items.depth),
            },
            0,
        )
    }
}

/// One container of `items`: their bytes plus its own, one deeper than the deepest.
fn fold<'a>(items: impl Iterator<Item = &'a Value>) -> Value {
    let mut v = Value {
        bytes: OBJECT_BYTES,
        depth: 1,
    };
    for item in items {
        v.bytes = v.bytes.saturating_add(item.bytes);
        v.depth = v.depth.max(item.depth.saturating_add(1));
    }
    v
}

/// Walks `pickles` pickle programs at the start of `bytes`; returns the offset after the last
/// STOP.
pub fn scan(bytes: &[u8], pickles: usize, limits: &PickleLimits) -> Result<usize, ScanError> {
    let mut pos = 0;
    for _ in 0..pickles {
        pos = scan_one(bytes, pos, limits)?;
    }
    Ok(pos)
}

/// Reads `n` bytes at `*pos` (advancing it).
fn take<'b>(bytes: &'b [u8], pos: &mut usize, n: u64) -> Result<&'b [u8], ScanError> {
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| pos.checked_add(n))
        .filter(|&end| end <= bytes.len())
        .ok_or(ScanError::Truncated { at: bytes.len() })?;
    let out = &bytes[*pos..end];
    *pos = end;
    Ok(out)
}

/// A little-endian unsigned integer of `n` bytes at `*pos`.
fn uint(bytes: &[u8], pos: &mut usize, n: u64) -> Result<u64, ScanError> {
    let raw = take(bytes, pos, n)?;
    Ok(raw
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
}

/// A newline-terminated argument at `*pos`; returns its length.
fn line(bytes: &[u8], pos: &mut usize) -> Result<u64, ScanError> {
    let rest = &bytes[*pos..];
    let n = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or(ScanError::Truncated { at: bytes.len() })?;
    *pos += n + 1;
    Ok(n as u64)
}

fn scan_one(bytes: &[u8], start: usize, limits: &PickleLimits) -> Result<usize, ScanError> {
    let mut m = Machine {
        stack: Vec::new(),
        marks: Vec::new(),
        memo: std::collections::HashMap::new(),
        total: 0,
        limits,
        at: start,
    };
    let mut pos = start;
    loop {
        m.at = pos;
        let op = *bytes.get(pos).ok_or(ScanError::Truncated { at: pos })?;
        pos += 1;
        match op {
            // STOP
            b'.' => return Ok(pos),
            // MARK
            b'(' => m.marks.push(m.stack.len()),
            // POP, POP_MARK, DUP
            b'0' => {
                m.pop()?;
            }
            b'1' => {
                m.pop_mark()?;
            }
            b'2' => {
                let top = *m
                    .stack
                    .last()
                    .ok_or_else(|| m.malformed("DUP of nothing"))?;
                m.push(top)?;
            }
            // Numbers and constants with fixed-size arguments.
            b'J' => m.scalar(take(bytes, &mut pos, 4)?.len() as u64)?,
            b'K' => m.scalar(take(bytes, &mut pos, 1)?.len() as u64)?,
            b'M' => m.scalar(take(bytes, &mut pos, 2)?.len() as u64)?,
            b'G' => m.scalar(take(bytes, &mut pos, 8)?.len() as u64)?,
            b'N' | 0x88 | 0x89 => m.scalar(0)?,
            // Text-mode arguments: FLOAT, INT, LONG, STRING, UNICODE.
            b'F' | b'I' | b'L' | b'S' | b'V' => {
                let n = line(bytes, &mut pos)?;
                m.scalar(n)?;
            }
            // Length-prefixed strings and bytes: SHORT_BINSTRING, SHORT_BINBYTES,
            // SHORT_BINUNICODE, LONG1 (1-byte length); BINSTRING, BINUNICODE, BINBYTES, LONG4
            // (4); BINUNICODE8, BINBYTES8, BYTEARRAY8 (8).
            b'U' | b'C' | 0x8c | 0x8a => {
                let n = uint(bytes, &mut pos, 1)?;
                take(bytes, &mut pos, n)?;
                m.scalar(n)?;
            }
            b'T' | b'X' | b'B' | 0x8b => {
                let n = uint(bytes, &mut pos, 4)?;
                take(bytes, &mut pos, n)?;
                m.scalar(n)?;
            }
            0x8d | 0x8e | 0x96 => {
                let n = uint(bytes, &mut pos, 8)?;
                take(bytes, &mut pos, n)?;
                m.scalar(n)?;
            }
            // Empty containers.
            b']' | b'}' | b')' | 0x8f => m.push(Value {
                bytes: OBJECT_BYTES,
                depth: 1,
            })?,
            // Containers of everything down to the MARK: TUPLE, LIST, DICT, FROZENSET.
            b't' | b'l' | b'd' | 0x91 => {
                let v = m.pop_mark()?;
                m.push_container(v)?;
            }
            // TUPLE1, TUPLE2, TUPLE3.
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(m.pop()?);
                }
                let v = fold(items.iter());
                m.push_container(v)?;
            }
            // APPEND, BUILD: one value into the object below it.
            b'a' | b'b' => {
                let v = m.pop()?;
                m.add_to_top(fold(std::iter::once(&v)))?;
            }
            // SETITEM: a key and a value into the dict below them.
            b's' => {
                let v = m.pop()?;
                let k = m.pop()?;
                m.add_to_top(fold([k, v].iter()))?;
            }
            // APPENDS, SETITEMS, ADDITEMS: everything down to the MARK into the object below it.
            b'e' | b'u' | 0x90 => {
                let items = m.pop_mark()?;
                m.add_to_top(items)?;
            }
            // GLOBAL, INST (two text lines); INST and OBJ also take the items down to a MARK.
            b'c' => {
                let n = line(bytes, &mut pos)? + line(bytes, &mut pos)?;
                m.scalar(n)?;
            }
            b'i' => {
                let n = line(bytes, &mut pos)? + line(bytes, &mut pos)?;
                let args = m.pop_mark()?;
                m.push_with(
                    Value {
                        bytes: args.bytes.saturating_add(OBJECT_BYTES + n),
                        depth: args.depth,
                    },
                    OBJECT_BYTES + n,
                )?;
            }
            b'o' => {
                let v = m.pop_mark()?;
                m.push_container(v)?;
            }
            // STACK_GLOBAL (module and name from the stack), REDUCE (callable, args), NEWOBJ
            // (class, args): two values become one.
            0x93 | b'R' | 0x81 => {
                let a = m.pop()?;
                let b = m.pop()?;
                let v = fold([b, a].iter());
                m.push_container(v)?;
            }
            // NEWOBJ_EX: class, args, kwargs.
            0x92 => {
                let a = m.pop()?;
                let b = m.pop()?;
                let c = m.pop()?;
                let v = fold([c, b, a].iter());
                m.push_container(v)?;
            }
            // PERSID (text), BINPERSID (from the stack): a storage reference.
            b'P' => {
                let n = line(bytes, &mut pos)?;
                m.scalar(n)?;
            }
            b'Q' => {
                let pid = m.pop()?;
                let v = fold(std::iter::once(&pid));
                m.push_container(v)?;
            }
            // PUT (text), BINPUT, LONG_BINPUT, MEMOIZE: the memo keeps a copy of the top.
            b'p' | b'q' | b'r' | 0x94 => {
                let idx = match op {
                    b'p' => {
                        let s = pos;
                        line(bytes, &mut pos)?;
                        parse_index(&bytes[s..pos - 1]).ok_or_else(|| m.malformed("PUT index"))?
                    }
                    b'q' => uint(bytes, &mut pos, 1)?,
                    b'r' => uint(bytes, &mut pos, 4)?,
                    _ => m.memo.len() as u64,
                };
                // Burn's reader stores a copy of the top in the memo.
                let top = *m
                    .stack
                    .last()
                    .ok_or_else(|| m.malformed("PUT of nothing"))?;
                m.allocate(top.bytes)?;
                m.memo.insert(idx, top);
            }
            // GET (text), BINGET, LONG_BINGET: a copy of a memoised value.
            b'g' | b'h' | b'j' => {
                let idx = match op {
                    b'g' => {
                        let s = pos;
                        line(bytes, &mut pos)?;
                        parse_index(&bytes[s..pos - 1]).ok_or_else(|| m.malformed("GET index"))?
                    }
                    b'h' => uint(bytes, &mut pos, 1)?,
                    _ => uint(bytes, &mut pos, 4)?,
                };
                let v = *m
                    .memo
                    .get(&idx)
                    .ok_or_else(|| m.malformed("GET of a memo entry never PUT"))?;
                m.push(v)?;
            }
            // PROTO (1-byte version), FRAME (8-byte length: framing only).
            0x80 => {
                take(bytes, &mut pos, 1)?;
            }
            0x95 => {
                take(bytes, &mut pos, 8)?;
            }
            // EXT1, EXT2, EXT4: an extension-registry code.
            0x82 => m.scalar(take(bytes, &mut pos, 1)?.len() as u64)?,
            0x83 => m.scalar(take(bytes, &mut pos, 2)?.len() as u64)?,
            0x84 => m.scalar(take(bytes, &mut pos, 4)?.len() as u64)?,
            // NEXT_BUFFER pushes an out-of-band buffer; READONLY_BUFFER changes nothing here.
            0x97 => m.scalar(0)?,
            0x98 => {}
            _ => return Err(ScanError::UnknownOpcode { op, at: m.at }),
        }
    }
}

fn parse_index(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protocol-2 pickle of `levels` lists, each holding the previous one twice by memo
    /// reference: a few bytes per level, 2^levels copies for a reader that copies memo values.
    fn memo_bomb(levels: u32) -> Vec<u8> {
        let mut p = vec![0x80, 2, b']', b'q', 0];
        for level in 1..=levels {
            let prev = (level - 1) as u8;
            // [memo[prev], memo[prev]], then memoised as `level`.
            p.extend([b']', b'(', b'h', prev, b'h', prev, b'e', b'q', level as u8]);
        }
        p.push(b'.');
        p
    }

    /// `depth` nested lists: `[[[...]]]`.
    fn nested(depth: usize) -> Vec<u8> {
        let mut p = vec![0x80, 2];
        p.extend(std::iter::repeat_n(b']', depth));
        p.extend(std::iter::repeat_n(b'a', depth - 1));
        p.push(b'.');
        p
    }

    #[test]
    fn the_memo_bomb_is_refused_before_anything_is_built() {
        let limits = PickleLimits::default();
        let e = scan(&memo_bomb(64), 1, &limits).unwrap_err();
        assert!(matches!(e, ScanError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("memo references are copied"), "{e}");
        // A few levels are a small, honest pickle.
        scan(&memo_bomb(4), 1, &limits).unwrap();
    }

    #[test]
    fn deep_nesting_is_refused_and_does_not_recurse() {
        let limits = PickleLimits::default();
        let e = scan(&nested(1_000_000), 1, &limits).unwrap_err();
        assert!(matches!(e, ScanError::TooDeep { limit: 256, .. }), "{e}");
        scan(&nested(200), 1, &limits).unwrap();
        let tight = PickleLimits {
            max_depth: 10,
            ..limits
        };
        assert!(scan(&nested(20), 1, &tight).is_err());
    }

    #[test]
    fn malformed_programs_are_errors_with_their_offset() {
        let limits = PickleLimits::default();
        assert_eq!(
            scan(&[0x80, 2, b']'], 1, &limits),
            Err(ScanError::Truncated { at: 3 })
        );
        assert_eq!(
            scan(&[0x80, 2, 0xff, b'.'], 1, &limits),
            Err(ScanError::UnknownOpcode { op: 0xff, at: 2 })
        );
        assert!(matches!(
            scan(&[0x80, 2, b'h', 7, b'.'], 1, &limits),
            Err(ScanError::Malformed { at: 2, .. })
        ));
        assert!(matches!(
            scan(&[0x80, 2, b'a', b'.'], 1, &limits),
            Err(ScanError::Malformed { .. })
        ));
        // A length that runs past the end.
        assert!(matches!(
            scan(&[0x80, 2, b'X', 0xff, 0xff, 0xff, 0x7f, b'.'], 1, &limits),
            Err(ScanError::Truncated { .. })
        ));
    }
}
