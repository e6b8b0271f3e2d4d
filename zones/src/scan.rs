//! The master-file scanner: splits text into entries (logical lines) and tokens.
//!
//! An entry ends at a newline outside parentheses. Tokens are words or quoted strings;
//! escapes are kept as written and decoded by whoever reads the token (a name and a
//! character-string decode them differently). The scanner reads its source through a fixed
//! window, so a file of any size costs at most the window in memory.

use std::io::Read;

/// Default size of the read window.
const WINDOW: usize = 1 << 20;
/// An entry longer than this is an error (it would otherwise grow the window without bound).
pub const MAX_ENTRY_BYTES: usize = 8 << 20;

/// One token of an entry, as offsets into the scanner's current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tok {
    /// First byte (after the opening quote for a quoted string).
    pub start: u32,
    /// One past the last byte (before the closing quote).
    pub end: u32,
    /// True for a `"quoted string"`.
    pub quoted: bool,
    /// True when the token holds a backslash escape.
    pub escaped: bool,
    /// 1-based line of the token's first byte.
    pub line: u32,
    /// 1-based column (in bytes) of the token's first byte.
    pub col: u32,
}

/// What the scanner reports about an entry besides its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryInfo {
    /// The entry's first line began with blank space: the owner is inherited.
    pub blank_owner: bool,
    /// 1-based line where the entry starts.
    pub line: u32,
}

/// A lexical error with its position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct ScanError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
    /// What went wrong.
    pub msg: String,
    /// The error concerns the whole source (I/O, size): stop scanning.
    pub fatal: bool,
}

enum Step {
    Entry(EntryInfo),
    Eof,
    NeedMore,
}

/// Scans entries from a reader (a file) or from bytes in memory.
pub struct Scanner {
    reader: Option<Box<dyn Read + Send>>,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    line: u32,
    line_start: usize,
}

impl Scanner {
    /// A scanner over bytes already in memory.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Scanner {
        let buf = bytes.into();
        let end = buf.len();
        Scanner {
            reader: None,
            buf,
            pos: 0,
            end,
            eof: true,
            line: 1,
            line_start: 0,
        }
    }

    /// A scanner that reads through a window of bounded size.
    pub fn from_reader(r: impl Read + Send + 'static) -> Scanner {
        Scanner {
            reader: Some(Box::new(r)),
            buf: vec![0; WINDOW],
            pos: 0,
            end: 0,
            eof: false,
            line: 1,
            line_start: 0,
        }
    }

    /// The bytes of a token returned by the last [`Scanner::next_entry`].
    pub fn text(&self, t: &Tok) -> &[u8] {
        &self.buf[t.start as usize..t.end as usize]
    }

    /// The current line (1-based), for errors after the last entry.
    pub fn line(&self) -> u32 {
        self.line
    }

    /// Reads the next entry's tokens into `out` (cleared first). `Ok(None)` at the end.
    ///
    /// After an error the scanner has skipped to the end of the offending line, so the
    /// caller may report it and go on.
    pub fn next_entry(&mut self, out: &mut Vec<Tok>) -> Result<Option<EntryInfo>, ScanError> {
        loop {
            let (pos, line, line_start) = (self.pos, self.line, self.line_start);
            out.clear();
            match self.try_entry(out) {
                Ok(Step::Entry(info)) => return Ok(Some(info)),
                Ok(Step::Eof) => return Ok(None),
                Ok(Step::NeedMore) => {
                    self.pos = pos;
                    self.line = line;
                    self.line_start = line_start;
                    self.refill()?;
                }
                Err(e) => {
                    if !e.fatal {
                        self.skip_line();
                    }
                    return Err(e);
                }
            }
        }
    }

    fn refill(&mut self) -> Result<(), ScanError> {
        let Some(reader) = self.reader.as_mut() else {
            self.eof = true;
            return Ok(());
        };
        // Keep the unfinished entry: move it to the front, grow if it fills the window.
        let keep = self.end - self.pos;
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.line_start = self.line_start.saturating_sub(self.pos);
            self.pos = 0;
            self.end = keep;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_ENTRY_BYTES {
                return Err(ScanError {
                    line: self.line,
                    col: 1,
                    msg: format!("entry longer than {MAX_ENTRY_BYTES} bytes"),
                    fatal: true,
                });
            }
            let n = (self.buf.len() * 2).min(MAX_ENTRY_BYTES);
            self.buf.resize(n, 0);
        }
        loop {
            match reader.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(ScanError {
                        line: self.line,
                        col: 1,
                        msg: format!("read error: {e}"),
                        fatal: true,
                    });
                }
            }
        }
    }

    /// The byte at `i`, when the window holds it.
    fn byte(&self, i: usize) -> Option<u8> {
        (i < self.end).then(|| self.buf[i])
    }

    fn skip_line(&mut self) {
        // Best effort within the window: recovery only needs to reach the next newline.
        while self.pos < self.end {
            let c = self.buf[self.pos];
            self.pos += 1;
            if c == b'\n' {
                self.line += 1;
                self.line_start = self.pos;
                return;
            }
        }
    }

    fn err(&self, msg: impl Into<String>, at: usize) -> ScanError {
        ScanError {
            line: self.line,
            col: (at.saturating_sub(self.line_start) + 1) as u32,
            msg: msg.into(),
            fatal: false,
        }
    }

    fn try_entry(&mut self, out: &mut Vec<Tok>) -> Result<Step, ScanError> {
        let mut depth = 0u32;
        let mut paren_line = 0u32;
        // Where the line that opened the outermost '(' ends: an entry whose '(' is never
        // closed is reported there, and reading resumes on the next line.
        let mut paren_line_end: Option<usize> = None;
        let mut info = EntryInfo {
            blank_owner: false,
            line: self.line,
        };
        let mut at_line_start = self.pos == self.line_start;
        loop {
            if self.pos >= self.end {
                if !self.eof {
                    return Ok(Step::NeedMore);
                }
                if depth > 0 {
                    let Some(end) = paren_line_end else {
                        return Err(ScanError {
                            line: paren_line,
                            col: 1,
                            msg: "unbalanced parentheses: '(' not closed".into(),
                            fatal: true,
                        });
                    };
                    // Resume after the opening line (the caller skips its newline).
                    self.pos = end;
                    self.line = paren_line;
                    self.line_start = end;
                    return Err(ScanError {
                        line: paren_line,
                        col: 1,
                        msg: "unbalanced parentheses: '(' not closed".into(),
                        fatal: false,
                    });
                }
                return Ok(if out.is_empty() {
                    Step::Eof
                } else {
                    Step::Entry(info)
                });
            }
            let c = self.buf[self.pos];
            match c {
                b'\n' => {
                    if depth > 0 && paren_line_end.is_none() {
                        paren_line_end = Some(self.pos);
                    }
                    self.pos += 1;
                    self.line += 1;
                    self.line_start = self.pos;
                    at_line_start = true;
                    if depth == 0 && !out.is_empty() {
                        return Ok(Step::Entry(info));
                    }
                    if out.is_empty() && depth == 0 {
                        // A blank or comment-only line: the next line decides.
                        info.blank_owner = false;
                    }
                }
                b'\r' if self.byte(self.pos + 1) != Some(b'\n') => {
                    if self.pos + 1 >= self.end && !self.eof {
                        return Ok(Step::NeedMore);
                    }
                    // Knot, NSD and BIND refuse it too: read as a blank, it would give a
                    // damaged line another meaning (`n<CR>2 A ...`: owner n, TTL 2).
                    return Err(self.err(
                        "a CR not followed by LF (a damaged line, or old Mac line endings)",
                        self.pos,
                    ));
                }
                b' ' | b'\t' | b'\r' => {
                    if at_line_start && out.is_empty() && depth == 0 {
                        info.blank_owner = true;
                    }
                    at_line_start = false;
                    self.pos += 1;
                }
                b';' => {
                    while self.pos < self.end && self.buf[self.pos] != b'\n' {
                        self.pos += 1;
                    }
                    if self.pos >= self.end && !self.eof {
                        return Ok(Step::NeedMore);
                    }
                }
                b'(' => {
                    if depth == 0 {
                        paren_line = self.line;
                    }
                    if out.is_empty() {
                        info.line = self.line;
                    }
                    depth += 1;
                    at_line_start = false;
                    self.pos += 1;
                }
                b')' => {
                    if depth == 0 {
                        return Err(self.err("unbalanced parentheses: ')' without '('", self.pos));
                    }
                    depth -= 1;
                    at_line_start = false;
                    self.pos += 1;
                }
                b'"' => {
                    let start = self.pos + 1;
                    let (line, col) = (self.line, (self.pos - self.line_start + 1) as u32);
                    let mut i = start;
                    let mut escaped = false;
                    // Newlines inside the quotes, within parentheses: part of the string (as
                    // Knot and NSD read them), counted as lines once the string is whole.
                    // Outside parentheses the entry would end there: refused (Knot and BIND).
                    let mut newlines = (0u32, 0usize);
                    loop {
                        if i >= self.end {
                            if !self.eof {
                                return Ok(Step::NeedMore);
                            }
                            return Err(self.err("unterminated quoted string", self.pos));
                        }
                        match self.buf[i] {
                            b'"' => break,
                            b'\\' => {
                                escaped = true;
                                if matches!(self.byte(i + 1), Some(b'\n' | b'\r')) {
                                    // On the line it is on, past the string's own newlines.
                                    if newlines.0 > 0 {
                                        self.line += newlines.0;
                                        self.line_start = newlines.1;
                                        self.pos = newlines.1;
                                    }
                                    return Err(self.err(ESCAPED_NEWLINE, i));
                                }
                                i += 2;
                            }
                            b'\n' if depth > 0 => {
                                if paren_line_end.is_none() {
                                    paren_line_end = Some(i);
                                }
                                newlines = (newlines.0 + 1, i + 1);
                                i += 1;
                            }
                            b'\n' => {
                                return Err(self.err(
                                    "newline inside a quoted string outside parentheses",
                                    self.pos,
                                ));
                            }
                            _ => i += 1,
                        }
                    }
                    if newlines.0 > 0 {
                        self.line += newlines.0;
                        self.line_start = newlines.1;
                    }
                    if out.is_empty() {
                        info.line = line;
                    }
                    out.push(Tok {
                        start: start as u32,
                        end: i as u32,
                        quoted: true,
                        escaped,
                        line,
                        col,
                    });
                    at_line_start = false;
                    self.pos = i + 1;
                }
                _ => {
                    let start = self.pos;
                    let (line, col) = (self.line, (self.pos - self.line_start + 1) as u32);
                    let mut i = start;
                    let mut escaped = false;
                    while i < self.end {
                        match self.buf[i] {
                            b' ' | b'\t' | b'\r' | b'\n' | b';' | b'(' | b')' | b'"' => break,
                            b'\\' => {
                                escaped = true;
                                if matches!(self.byte(i + 1), Some(b'\n' | b'\r')) {
                                    return Err(self.err(ESCAPED_NEWLINE, i));
                                }
                                i += 2;
                            }
                            _ => i += 1,
                        }
                    }
                    if i >= self.end && !self.eof {
                        return Ok(Step::NeedMore);
                    }
                    let i = i.min(self.end);
                    if out.is_empty() {
                        info.line = line;
                    }
                    out.push(Tok {
                        start: start as u32,
                        end: i as u32,
                        quoted: false,
                        escaped,
                        line,
                        col,
                    });
                    at_line_start = false;
                    self.pos = i;
                }
            }
        }
    }
}

/// A backslash that ends its line: Knot, NSD and BIND refuse it outside quotes; inside a
/// quoted string Knot refuses it too, where NSD and BIND take the line break into the text
/// (a stray `\` at the end of a TXT would swallow the next record).
const ESCAPED_NEWLINE: &str = "a backslash before the end of the line (an escaped newline)";

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(src: &str) -> Vec<(bool, Vec<String>)> {
        let mut s = Scanner::from_bytes(src.as_bytes().to_vec());
        let mut toks = Vec::new();
        let mut out = Vec::new();
        while let Some(info) = s.next_entry(&mut toks).unwrap() {
            out.push((
                info.blank_owner,
                toks.iter()
                    .map(|t| String::from_utf8_lossy(s.text(t)).into_owned())
                    .collect(),
            ));
        }
        out
    }

    /// The first error scanning `src`: its line and message.
    fn first_error(src: &[u8]) -> Option<(u32, String)> {
        let mut s = Scanner::from_bytes(src.to_vec());
        let mut toks = Vec::new();
        loop {
            match s.next_entry(&mut toks) {
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(e) => return Some((e.line, e.msg)),
            }
        }
    }

    #[test]
    fn a_newline_inside_quotes_is_read_within_parentheses_only() {
        // Within parentheses: part of the string (Knot and NSD; BIND refuses), and the lines
        // after it keep their numbers.
        let (line, msg) =
            first_error(b"a TXT ( \"first\nsecond\" third )\nb\r2 A 1.2.3.5\n").unwrap();
        assert_eq!(line, 3, "{msg}");
        assert!(msg.contains("CR not followed by LF"), "{msg}");
        // Outside: the entry would end there (Knot and BIND refuse; NSD reads it).
        let (line, msg) = first_error(b"a TXT \"a\nb\"\n").unwrap();
        assert_eq!(line, 1);
        assert!(msg.contains("outside parentheses"), "{msg}");
        // An error inside such a string names its own line.
        let (line, msg) = first_error(b"a TXT ( \"first\nsec\\\nond\" )\n").unwrap();
        assert_eq!(line, 2, "{msg}");
        assert!(msg.contains("escaped newline"), "{msg}");
    }

    #[test]
    fn a_bare_cr_or_an_escaped_newline_is_refused_crlf_is_not() {
        assert_eq!(first_error(b"a A 1.2.3.4\r\nb A 1.2.3.5\r\n"), None);
        assert_eq!(first_error(b"a TXT \"x\" ; c\rd\r\n"), None, "in a comment");
        let (line, msg) = first_error(b"a A 1.2.3.4\nn\r2 A 1.2.3.5\n").unwrap();
        assert_eq!(line, 2);
        assert!(msg.contains("CR not followed by LF"), "{msg}");
        assert!(
            first_error(b"a A 1.2.3.4\rb A 1.2.3.5\r").is_some(),
            "old Mac endings"
        );
        for src in [
            &b"w TXT \"w\"\\\nc CAA 0 issue \"ca\"\n"[..],
            b"w TXT w\\\nc A 1.2.3.4\n",
            b"w TXT \"w\\\n\"\n",
            b"w TXT w\\\r\n",
        ] {
            let (line, msg) = first_error(src).unwrap();
            assert_eq!(line, 1, "{}", String::from_utf8_lossy(src));
            assert!(msg.contains("escaped newline"), "{msg}");
        }
    }

    #[test]
    fn lines_parens_comments_quotes() {
        let e = entries(
            "a 1 IN A 1.2.3.4 ; c\n\n  ; only comment\n\tTXT \"x y\" \"\" ; z\n@ SOA ( ns host\n 1 2 ; mid\n 3 4 5 )\n",
        );
        assert_eq!(e.len(), 3);
        assert_eq!(
            e[0],
            (
                false,
                vec!["a", "1", "IN", "A", "1.2.3.4"]
                    .into_iter()
                    .map(String::from)
                    .collect()
            )
        );
        assert_eq!(
            e[1],
            (true, vec!["TXT".to_string(), "x y".into(), "".into()])
        );
        assert_eq!(e[2].1.len(), 9);
    }

    #[test]
    fn escapes_stay_in_token() {
        let e = entries("a\\ b\\;c TXT \"q\\\"q\"\n");
        assert_eq!(e[0].1, vec!["a\\ b\\;c", "TXT", "q\\\"q"]);
    }

    #[test]
    fn unbalanced() {
        let mut s = Scanner::from_bytes(b"a ( b\n".to_vec());
        let mut t = Vec::new();
        assert!(s.next_entry(&mut t).is_err());
        let mut s = Scanner::from_bytes(b"a ) b\nc d\n".to_vec());
        assert!(s.next_entry(&mut t).is_err());
        // Recovery goes on with the next line.
        assert_eq!(s.next_entry(&mut t).unwrap().unwrap().line, 2);
    }

    #[test]
    fn window_refill_gives_same_tokens() {
        // Entries cut across the window boundary must come out whole.
        let mut src = String::new();
        for i in 0..60_000 {
            src.push_str(&format!("name{i} 300 IN TXT \"some text {i}\" ( x\n y )\n"));
        }
        let mem = entries(&src);
        let mut s = Scanner::from_reader(std::io::Cursor::new(src.into_bytes()));
        let mut toks = Vec::new();
        let mut n = 0;
        while let Some(info) = s.next_entry(&mut toks).unwrap() {
            let got: Vec<String> = toks
                .iter()
                .map(|t| String::from_utf8_lossy(s.text(t)).into_owned())
                .collect();
            assert_eq!(got, mem[n].1);
            assert_eq!(info.line as usize, 2 * n + 1);
            n += 1;
        }
        assert_eq!(n, 60_000);
    }
}
