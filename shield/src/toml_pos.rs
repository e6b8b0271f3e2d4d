//! Where in a TOML file an error is: one helper for every config and rules file, so that
//! each names `file:line:col` (columns in characters) and the dotted key the same way.

/// 1-based line and column (in characters, not bytes) of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |p| p + 1);
    (line, text[start..offset].chars().count() + 1)
}

/// A TOML error located in its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column in characters (0 when unknown).
    pub col: usize,
    /// The dotted key the error is about (empty when the parser did not name one).
    pub key: String,
    /// The message without position or key.
    pub message: String,
}

/// Locates a parse or schema error of `text`.
pub fn locate(text: &str, e: &toml::de::Error) -> Located {
    let (line, col) = e.span().map_or((0, 0), |s| line_col(text, s.start));
    let mut bare = e.clone();
    bare.set_input(None);
    let shown = bare.to_string();
    let key = shown
        .lines()
        .find_map(|l| l.strip_prefix("in `").and_then(|k| k.strip_suffix('`')))
        .unwrap_or("")
        .to_string();
    Located {
        line,
        col,
        key,
        message: e.message().trim().to_string(),
    }
}

/// Where the value of `key` (dotted, with `[i]` for an array's element: `zone[1].origin`)
/// stands in `text`: its 1-based line and column, when the text holds it.
pub fn key_position(text: &str, key: &str) -> Option<(usize, usize)> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(text).ok()?;
    let span = doc.span();
    let root = toml::Spanned::new(span, DeValue::Table(doc.into_inner()));
    let mut at = &root;
    for seg in key.split('.') {
        let (name, mut rest) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        if !name.is_empty() {
            at = at.get_ref().get(name)?;
        }
        while let Some(r) = rest.strip_prefix('[') {
            let (i, tail) = r.split_once(']')?;
            at = at.get_ref().get(i.parse::<usize>().ok()?)?;
            rest = tail;
        }
    }
    Some(line_col(text, at.span().start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_by_their_dotted_path() {
        let t = "[server]\nport = 53\n\n[[zone]]\norigin = \"a.\"\n\n[[zone]]\norigin = \"b.\"\n";
        assert_eq!(key_position(t, "server.port"), Some((2, 8)));
        assert_eq!(key_position(t, "zone[1].origin"), Some((8, 10)));
        assert_eq!(key_position(t, "zone[2].origin"), None);
        assert_eq!(key_position(t, "nothing"), None);
    }

    #[test]
    fn columns_count_characters() {
        let t = "a\nbc\né = 1\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 2), (2, 1));
        // `=` after a two-byte `é` and a space: column 3, not 4.
        assert_eq!(line_col(t, t.find('=').unwrap()), (3, 3));
        assert_eq!(line_col(t, 999), (4, 1));
    }

    #[test]
    fn a_schema_error_names_its_key() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        struct S {
            #[allow(dead_code)]
            server: Inner,
        }
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        struct Inner {
            #[allow(dead_code)]
            port: u16,
        }
        let text = "[server]\nport = \"x\"\n";
        let e = toml::from_str::<S>(text).unwrap_err();
        let l = locate(text, &e);
        assert_eq!((l.line, l.col), (2, 8));
        assert_eq!(l.key, "server.port");
    }
}
