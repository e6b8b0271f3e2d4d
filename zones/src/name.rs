//! Domain names: absolute, uncompressed wire format, parsed from and printed to presentation text.
//!
//! A [`Name`] owns its wire bytes (at most 255 octets, labels of at most 63). Equality,
//! hashing and ordering ignore ASCII case; ordering is the canonical order of RFC 4034 §6.1.
//! [`NameBuf`] is the allocation-free form used while scanning a zone or a query.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

/// Longest name in wire format, root label included (RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 255;
/// Longest label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;

/// Why a name could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// A label is longer than 63 octets.
    #[error("label longer than 63 octets")]
    LabelTooLong,
    /// The name is longer than 255 octets in wire format.
    #[error("name longer than 255 octets")]
    NameTooLong,
    /// Two dots in a row, or a leading dot in a multi-label name.
    #[error("empty label in name")]
    EmptyLabel,
    /// A backslash escape that is cut short or out of range.
    #[error("bad escape in name")]
    BadEscape,
    /// A relative name where no origin is known.
    #[error("relative name without an origin")]
    NoOrigin,
    /// Wire bytes that are not a valid uncompressed name.
    #[error("malformed name in wire format")]
    BadWire,
    /// An empty token where a name was expected.
    #[error("empty name")]
    Empty,
}

/// A name being built or scanned, held inline without allocation.
#[derive(Clone)]
pub struct NameBuf {
    buf: [u8; MAX_NAME_LEN],
    len: u8,
}

impl Default for NameBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl NameBuf {
    /// An empty buffer (not yet a name: call one of the `parse`/`push` functions).
    pub const fn new() -> Self {
        NameBuf {
            buf: [0; MAX_NAME_LEN],
            len: 0,
        }
    }

    /// The wire bytes written so far.
    pub fn as_wire(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// Forgets the contents.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Replaces the contents with `wire`, which must be a valid absolute name.
    pub fn set_wire(&mut self, wire: &[u8]) {
        self.buf[..wire.len()].copy_from_slice(wire);
        self.len = wire.len() as u8;
    }

    /// Lower-cases ASCII letters in place.
    pub fn make_lowercase(&mut self) {
        self.buf[..self.len as usize].make_ascii_lowercase();
    }

    /// Parses presentation text, making a relative name absolute with `origin`.
    ///
    /// `@` stands for the origin. Escapes `\DDD` and `\X` are honoured.
    pub fn parse(&mut self, text: &[u8], origin: Option<&[u8]>) -> Result<(), NameError> {
        self.len = 0;
        if text.is_empty() {
            return Err(NameError::Empty);
        }
        if text == b"@" {
            let o = origin.ok_or(NameError::NoOrigin)?;
            self.set_wire(o);
            return Ok(());
        }
        if text == b"." {
            self.buf[0] = 0;
            self.len = 1;
            return Ok(());
        }
        let mut out = 0usize; // write position
        let mut label_start = 0usize; // position of the current label's length byte
        let mut label_len = 0usize;
        let mut i = 0usize;
        let mut absolute = false;
        // Reserve the first length byte.
        self.buf[0] = 0;
        out += 1;
        while i < text.len() {
            let c = text[i];
            if c == b'.' {
                if label_len == 0 {
                    return Err(NameError::EmptyLabel);
                }
                self.buf[label_start] = label_len as u8;
                if i + 1 == text.len() {
                    absolute = true;
                    break;
                }
                if out >= MAX_NAME_LEN {
                    return Err(NameError::NameTooLong);
                }
                label_start = out;
                self.buf[out] = 0;
                out += 1;
                label_len = 0;
                i += 1;
                continue;
            }
            let byte = if c == b'\\' {
                let (b, used) = unescape(&text[i..]).ok_or(NameError::BadEscape)?;
                i += used;
                b
            } else {
                i += 1;
                c
            };
            if label_len == MAX_LABEL_LEN {
                return Err(NameError::LabelTooLong);
            }
            if out >= MAX_NAME_LEN {
                return Err(NameError::NameTooLong);
            }
            self.buf[out] = byte;
            out += 1;
            label_len += 1;
        }
        if !absolute {
            // Close the last label and append the origin.
            self.buf[label_start] = label_len as u8;
            let o = origin.ok_or(NameError::NoOrigin)?;
            if out + o.len() > MAX_NAME_LEN {
                return Err(NameError::NameTooLong);
            }
            self.buf[out..out + o.len()].copy_from_slice(o);
            out += o.len();
        } else {
            if out >= MAX_NAME_LEN {
                return Err(NameError::NameTooLong);
            }
            self.buf[out] = 0;
            out += 1;
        }
        self.len = out as u8;
        Ok(())
    }

    /// Prepends one label (raw octets) to the current name.
    pub fn push_front_label(&mut self, label: &[u8]) -> Result<(), NameError> {
        if label.is_empty() {
            return Err(NameError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(NameError::LabelTooLong);
        }
        let old = self.len as usize;
        let new = old + 1 + label.len();
        if new > MAX_NAME_LEN {
            return Err(NameError::NameTooLong);
        }
        self.buf.copy_within(0..old, 1 + label.len());
        self.buf[0] = label.len() as u8;
        self.buf[1..1 + label.len()].copy_from_slice(label);
        self.len = new as u8;
        Ok(())
    }

    /// Turns the buffer into an owned [`Name`].
    pub fn to_name(&self) -> Name {
        Name {
            wire: self.as_wire().into(),
        }
    }
}

/// Decodes one escape at the start of `s` (which begins with a backslash): the byte and
/// how many input bytes it used.
pub fn unescape(s: &[u8]) -> Option<(u8, usize)> {
    debug_assert_eq!(s.first(), Some(&b'\\'));
    let c1 = *s.get(1)?;
    if c1.is_ascii_digit() {
        let c2 = *s.get(2)?;
        let c3 = *s.get(3)?;
        if !c2.is_ascii_digit() || !c3.is_ascii_digit() {
            return None;
        }
        let v = (c1 - b'0') as u32 * 100 + (c2 - b'0') as u32 * 10 + (c3 - b'0') as u32;
        if v > 255 {
            return None;
        }
        Some((v as u8, 4))
    } else {
        Some((c1, 2))
    }
}

/// An absolute domain name in uncompressed wire format.
#[derive(Clone)]
pub struct Name {
    wire: Box<[u8]>,
}

impl Name {
    /// The root name `.`.
    pub fn root() -> Name {
        Name {
            wire: Box::new([0u8]),
        }
    }

    /// Checks and wraps uncompressed wire bytes.
    pub fn from_wire(wire: &[u8]) -> Result<Name, NameError> {
        if wire_name_len(wire) != Some(wire.len()) {
            return Err(NameError::BadWire);
        }
        Ok(Name { wire: wire.into() })
    }

    /// Parses presentation text relative to `origin` (if the text is relative).
    pub fn parse(text: &str, origin: Option<&Name>) -> Result<Name, NameError> {
        let mut b = NameBuf::new();
        b.parse(text.as_bytes(), origin.map(|o| o.as_wire()))?;
        Ok(b.to_name())
    }

    /// The wire bytes.
    pub fn as_wire(&self) -> &[u8] {
        &self.wire
    }

    /// Length in wire format.
    pub fn wire_len(&self) -> usize {
        self.wire.len()
    }

    /// Number of labels, the root label not counted (`example.com.` has 2).
    pub fn label_count(&self) -> usize {
        label_count(&self.wire)
    }

    /// True for `.`.
    pub fn is_root(&self) -> bool {
        self.wire.len() == 1
    }

    /// True when the first label is `*`.
    pub fn is_wildcard(&self) -> bool {
        self.wire.len() >= 2 && self.wire[0] == 1 && self.wire[1] == b'*'
    }

    /// The same name in lower case.
    pub fn to_lowercase(&self) -> Name {
        let mut w: Box<[u8]> = self.wire.clone();
        w.make_ascii_lowercase();
        Name { wire: w }
    }

    /// The name without its first label, or `None` for the root.
    pub fn parent(&self) -> Option<Name> {
        if self.is_root() {
            return None;
        }
        let skip = 1 + self.wire[0] as usize;
        Some(Name {
            wire: self.wire[skip..].into(),
        })
    }

    /// True when `self` equals `other` or lies below it (case-insensitively).
    pub fn is_subdomain_of(&self, other: &Name) -> bool {
        is_subdomain(&self.wire, &other.wire)
    }

    /// Iterates over the labels (raw octets), leftmost first, root excluded.
    pub fn labels(&self) -> Labels<'_> {
        Labels { wire: &self.wire }
    }

    /// Prepends a label.
    pub fn prepend(&self, label: &[u8]) -> Result<Name, NameError> {
        let mut b = NameBuf::new();
        b.set_wire(&self.wire);
        b.push_front_label(label)?;
        Ok(b.to_name())
    }
}

/// Iterator over the labels of a wire-format name.
pub struct Labels<'a> {
    wire: &'a [u8],
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let len = *self.wire.first()? as usize;
        if len == 0 {
            return None;
        }
        let l = &self.wire[1..1 + len];
        self.wire = &self.wire[1 + len..];
        Some(l)
    }
}

/// A zone name (presentation form) as one safe file-name component: lower case without the
/// final dot, `@` for the root, and every byte but `a-z 0-9 . - _` (and a leading dot) as
/// `%XX`, so that no name
/// (a `/` in a label, an escape) can reach outside the directory it is joined to.
pub fn file_stem(presentation: &str) -> String {
    let z = presentation.strip_suffix('.').unwrap_or(presentation);
    if z.is_empty() {
        return "@".into();
    }
    let mut out = String::with_capacity(z.len());
    for b in z.bytes().map(|b| b.to_ascii_lowercase()) {
        match b {
            b'.' if out.is_empty() => out.push_str("%2e"),
            b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' | b'_' => out.push(b as char),
            _ => {
                use std::fmt::Write as _;
                let _ = write!(out, "%{b:02x}");
            }
        }
    }
    out
}

/// Longest file-name component Linux takes (`NAME_MAX`).
pub const FILE_NAME_MAX: usize = 255;

/// `stem` (as [`file_stem`] writes it) for a file-name component with `other` bytes besides
/// it: as it is when the component fits in [`FILE_NAME_MAX`], else cut and ended with `~` and
/// 16 hex digits of its SHA-256 (`~` is in no stem, so a cut stem is never another's whole
/// one). A zone name near 255 bytes, or one of escaped bytes, made a file name the system
/// refuses: a catalog member or secondary so named was never served.
pub fn fit_stem(stem: &str, other: usize) -> std::borrow::Cow<'_, str> {
    let room = FILE_NAME_MAX.saturating_sub(other);
    if stem.len() <= room {
        return stem.into();
    }
    use sha2::Digest as _;
    let h = sha2::Sha256::digest(stem.as_bytes());
    let mut keep = room.saturating_sub(17).min(stem.len());
    while !stem.is_char_boundary(keep) {
        keep -= 1;
    }
    let mut out = String::with_capacity(keep + 17);
    out.push_str(&stem[..keep]);
    out.push('~');
    for b in &h[..8] {
        use std::fmt::Write as _;
        let _ = write!(out, "{b:02x}");
    }
    out.into()
}

/// Length of the uncompressed wire name at the start of `wire`, if it is well formed.
pub fn wire_name_len(wire: &[u8]) -> Option<usize> {
    let mut i = 0usize;
    loop {
        let l = *wire.get(i)? as usize;
        if l > MAX_LABEL_LEN {
            return None;
        }
        i += 1 + l;
        if i > MAX_NAME_LEN {
            return None;
        }
        if l == 0 {
            return Some(i);
        }
    }
}

/// Number of labels in a valid wire name, root not counted.
pub fn label_count(wire: &[u8]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while wire[i] != 0 {
        n += 1;
        i += 1 + wire[i] as usize;
    }
    n
}

/// True when wire name `a` equals or lies below wire name `b`, ignoring case.
pub fn is_subdomain(a: &[u8], b: &[u8]) -> bool {
    if a.len() < b.len() {
        return false;
    }
    // Walk a's labels until the remaining length equals b's length, then compare.
    let mut i = 0;
    while a.len() - i > b.len() {
        i += 1 + a[i] as usize;
    }
    a.len() - i == b.len() && a[i..].eq_ignore_ascii_case(b)
}

/// Compares two wire names in the canonical order of RFC 4034 §6.1 (case-insensitive).
pub fn canonical_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let mut la = [0u8; 128];
    let mut lb = [0u8; 128];
    let na = label_offsets(a, &mut la);
    let nb = label_offsets(b, &mut lb);
    let (mut ia, mut ib) = (na, nb);
    while ia > 0 && ib > 0 {
        ia -= 1;
        ib -= 1;
        let xa = label_at(a, la[ia]);
        let xb = label_at(b, lb[ib]);
        let n = xa.len().min(xb.len());
        for k in 0..n {
            let ca = xa[k].to_ascii_lowercase();
            let cb = xb[k].to_ascii_lowercase();
            if ca != cb {
                return ca.cmp(&cb);
            }
        }
        if xa.len() != xb.len() {
            return xa.len().cmp(&xb.len());
        }
    }
    na.cmp(&nb)
}

/// Writes the offset of each label of a wire name into `out`; returns the label count.
pub fn label_offsets(wire: &[u8], out: &mut [u8; 128]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while wire[i] != 0 {
        out[n] = i as u8;
        n += 1;
        i += 1 + wire[i] as usize;
    }
    n
}

fn label_at(wire: &[u8], off: u8) -> &[u8] {
    let o = off as usize;
    &wire[o + 1..o + 1 + wire[o] as usize]
}

/// Appends the canonical sort key of a wire name to `out`: byte-wise comparison of keys
/// gives the canonical order (labels from the root, lower-cased, 0 as label separator).
pub fn canonical_key(wire: &[u8], out: &mut Vec<u8>) {
    canonical_key_below(wire, 0, out);
}

/// Like [`canonical_key`], but only for the labels above the last `skip_labels` ones
/// (the key of a name relative to an ancestor, such as a zone apex).
pub fn canonical_key_below(wire: &[u8], skip_labels: usize, out: &mut Vec<u8>) {
    let mut offs = [0u8; 128];
    let n = label_offsets(wire, &mut offs).saturating_sub(skip_labels);
    for k in (0..n).rev() {
        for &c in label_at(wire, offs[k]) {
            match c {
                0 => out.extend_from_slice(&[1, 1]),
                1 => out.extend_from_slice(&[1, 2]),
                c => out.push(c.to_ascii_lowercase()),
            }
        }
        out.push(0);
    }
}

/// Writes a wire name in presentation format, escaping as RFC 1035 §5.1 asks.
pub fn write_presentation(wire: &[u8], f: &mut impl fmt::Write) -> fmt::Result {
    if wire.len() <= 1 {
        return f.write_char('.');
    }
    let mut i = 0;
    while wire[i] != 0 {
        let l = wire[i] as usize;
        for &c in &wire[i + 1..i + 1 + l] {
            write_label_byte(c, f)?;
        }
        f.write_char('.')?;
        i += 1 + l;
    }
    Ok(())
}

fn write_label_byte(c: u8, f: &mut impl fmt::Write) -> fmt::Result {
    match c {
        b'.' | b'\\' | b'"' | b'(' | b')' | b';' | b'@' | b'$' => {
            f.write_char('\\')?;
            f.write_char(c as char)
        }
        0x21..=0x7e => f.write_char(c as char),
        _ => write!(f, "\\{c:03}"),
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_presentation(&self.wire, f)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({self})")
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.wire.eq_ignore_ascii_case(&other.wire)
    }
}
impl Eq for Name {}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.wire.len());
        for &c in self.wire.iter() {
            state.write_u8(c.to_ascii_lowercase());
        }
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Name {
    fn cmp(&self, other: &Name) -> Ordering {
        canonical_cmp(&self.wire, &other.wire)
    }
}

impl std::str::FromStr for Name {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Name, NameError> {
        Name::parse(s, Some(&Name::root()))
    }
}

/// Reads a possibly compressed name at `pos` of `msg`, appending it uncompressed (wire form,
/// case kept) to `out`; returns the offset just past it in place. Pointers must point
/// backwards, at most 127 of them are followed, and the name is at most 255 octets; `None`
/// otherwise.
pub fn read_compressed(msg: &[u8], mut pos: usize, out: &mut Vec<u8>) -> Option<usize> {
    let mut len = 0usize;
    let mut after = None;
    let mut hops = 0;
    let mut limit = pos;
    loop {
        let l = *msg.get(pos)? as usize;
        if l & 0xC0 == 0xC0 {
            let ptr = ((l & 0x3F) << 8) | *msg.get(pos + 1)? as usize;
            if after.is_none() {
                after = Some(pos + 2);
            }
            hops += 1;
            if hops > 127 || ptr >= limit {
                return None;
            }
            limit = ptr;
            pos = ptr;
            continue;
        }
        if l & 0xC0 != 0 || len + 1 + l > 255 {
            return None;
        }
        out.extend_from_slice(msg.get(pos..pos + 1 + l)?);
        len += 1 + l;
        pos += 1 + l;
        if l == 0 {
            return Some(after.unwrap_or(pos));
        }
    }
}

/// A wire name in presentation format (for messages).
pub(crate) fn display(wire: &[u8]) -> String {
    let mut s = String::new();
    let _ = write_presentation(wire, &mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        s.parse().unwrap()
    }

    #[test]
    fn parse_absolute_and_relative() {
        let origin = n("example.com.");
        assert_eq!(
            n("www.example.com.").as_wire(),
            b"\x03www\x07example\x03com\x00"
        );
        let rel = Name::parse("www", Some(&origin)).unwrap();
        assert_eq!(rel, n("www.example.com."));
        assert_eq!(Name::parse("@", Some(&origin)).unwrap(), origin);
        assert!(n(".").is_root());
        assert_eq!(Name::parse("www", None), Err(NameError::NoOrigin));
    }

    #[test]
    fn escapes() {
        let a = n("a\\.b.c.");
        assert_eq!(a.as_wire(), b"\x03a.b\x01c\x00");
        assert_eq!(a.label_count(), 2);
        let d = n("\\065\\000x.");
        assert_eq!(d.as_wire(), b"\x03A\x00x\x00");
        assert_eq!(d.to_string(), "A\\000x.");
        assert_eq!(a.to_string(), "a\\.b.c.");
        assert_eq!(Name::parse("a\\25", None), Err(NameError::BadEscape));
        assert_eq!(Name::parse("a\\256.", None), Err(NameError::BadEscape));
    }

    #[test]
    fn limits() {
        let l63 = "a".repeat(63);
        let l64 = "a".repeat(64);
        assert!(Name::parse(&format!("{l63}."), None).is_ok());
        assert_eq!(
            Name::parse(&format!("{l64}."), None),
            Err(NameError::LabelTooLong)
        );
        // 4 labels of 63 = 4*64 + 1 = 257 > 255.
        let long = format!("{l63}.{l63}.{l63}.{l63}.");
        assert_eq!(Name::parse(&long, None), Err(NameError::NameTooLong));
        let ok = format!("{l63}.{l63}.{l63}.{}.", "a".repeat(61));
        assert_eq!(Name::parse(&ok, None).unwrap().wire_len(), 255);
        assert_eq!(Name::parse("a..b.", None), Err(NameError::EmptyLabel));
        assert_eq!(Name::parse(".a.", None), Err(NameError::EmptyLabel));
    }

    #[test]
    fn case_insensitive_eq_and_subdomain() {
        assert_eq!(n("WWW.Example.COM."), n("www.example.com."));
        assert!(n("a.b.Example.com.").is_subdomain_of(&n("example.COM.")));
        assert!(!n("aexample.com.").is_subdomain_of(&n("example.com.")));
        assert!(n("x.").is_subdomain_of(&Name::root()));
    }

    #[test]
    fn canonical_order_rfc4034() {
        // The example list of RFC 4034 §6.1, in order.
        let names = [
            "example.",
            "a.example.",
            "yljkjljk.a.example.",
            "Z.a.example.",
            "zABC.a.EXAMPLE.",
            "z.example.",
            "\\001.z.example.",
            "*.z.example.",
            "\\200.z.example.",
        ];
        for w in names.windows(2) {
            assert_eq!(n(w[0]).cmp(&n(w[1])), Ordering::Less, "{} < {}", w[0], w[1]);
            let (mut ka, mut kb) = (Vec::new(), Vec::new());
            canonical_key(n(w[0]).as_wire(), &mut ka);
            canonical_key(n(w[1]).as_wire(), &mut kb);
            assert!(ka < kb, "key {} < {}", w[0], w[1]);
        }
    }

    #[test]
    fn labels_and_parent() {
        let a = n("a.b.c.");
        let ls: Vec<&[u8]> = a.labels().collect();
        assert_eq!(ls, vec![&b"a"[..], b"b", b"c"]);
        assert_eq!(a.parent().unwrap(), n("b.c."));
        assert_eq!(a.prepend(b"*").unwrap(), n("*.a.b.c."));
        assert!(n("*.x.").is_wildcard());
        assert_eq!(Name::from_wire(b"\x01a"), Err(NameError::BadWire));
    }

    #[test]
    fn file_stems_stay_in_their_directory() {
        assert_eq!(file_stem("Example.COM."), "example.com");
        assert_eq!(file_stem("."), "@");
        assert_eq!(file_stem(""), "@");
        assert_eq!(
            file_stem("0/25.2.0.192.in-addr.arpa."),
            "0%2f25.2.0.192.in-addr.arpa"
        );
        assert_eq!(file_stem("/etc/cron.d."), "%2fetc%2fcron.d");
        assert_eq!(file_stem("a\\.b+c%."), "a%5c.b%2bc%25");
        for n in ["/etc/cron.d.", "..", "a/../../b.", "\\046\\046."] {
            let p = std::path::Path::new("/var/lib/x").join(file_stem(n));
            assert_eq!(p.parent(), Some(std::path::Path::new("/var/lib/x")), "{n}");
            assert!(!matches!(file_stem(n).as_str(), "." | ".."), "{n}");
        }
    }

    #[test]
    fn a_stem_too_long_for_a_file_name_is_cut_and_hashed() {
        let short = file_stem("example.com.");
        assert_eq!(fit_stem(&short, 5), short);
        // 63-byte labels: 4 × 64 − 1 = 255 bytes of stem.
        let label = "a".repeat(63);
        let long = file_stem(&format!("{label}.{label}.{label}.{label}."));
        assert_eq!(long.len(), 255);
        assert_eq!(fit_stem(&long, 0), long, "255 bytes fit alone");
        let cut = fit_stem(&long, 5);
        assert_eq!(cut.len(), 250);
        assert!(cut.starts_with(&long[..233]) && cut.as_bytes()[233] == b'~');
        // Deterministic, and names that share the kept part do not share the cut.
        assert_eq!(fit_stem(&long, 5), cut);
        let other = file_stem(&format!("{label}.{label}.{label}.{}b.", &label[..62]));
        assert_ne!(fit_stem(&other, 5), cut);
        // Escapes (%XX per byte) triple a name's length.
        let escaped = file_stem(&"\\000.".repeat(60));
        assert!(escaped.len() > 255 && fit_stem(&escaped, 9).len() == 246);
        // Multi-byte characters are never split.
        let wide = "é".repeat(200);
        assert!(fit_stem(&wide, 0).len() <= 255);
    }
}
