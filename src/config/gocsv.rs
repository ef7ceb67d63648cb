//! Go's `encoding/csv` reader as dcgm-exporter configures it (`Comma = ','`,
//! `Comment = '#'`, `LazyQuotes = false`, `TrimLeadingSpace = false`), so that a counters
//! file is accepted or refused exactly as upstream does: a `#` starts a comment only as
//! the first byte of a line, empty lines are skipped (a line of spaces is a record), CRLF
//! reads as LF, a quote may open a field only as its first byte, `""` inside a quoted field
//! is one quote, a quoted field may span lines, and an unclosed quote is an error.
//!
//! The field-count rule is the one dcgm-exporter ends up with: Go fixes the count at the
//! first record's and dcgm-exporter then wants 3, so every record needs `fields` fields.

use std::fmt;

/// One record and the 1-based line it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub line: usize,
    pub fields: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// A `"` inside a field that does not start with one (Go's `ErrBareQuote`).
    BareQuote,
    /// A quoted field not closed, or its closing quote followed by something other than a
    /// comma or the end of the line (Go's `ErrQuote`).
    Quote,
    /// A record with another number of fields (Go's `ErrFieldCount`).
    FieldCount { expected: usize, found: usize },
}

/// Where Go's reader stops, with Go's wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ParseError {
    /// Line the record starts on.
    pub start_line: usize,
    /// Line and 1-based byte column of the error.
    pub line: usize,
    pub column: usize,
    pub kind: ErrorKind,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::BareQuote => write!(
                f,
                "bare \" in non-quoted field (column {}); a quoted field must start \
                 right after the comma, with no space before the quote",
                self.column
            ),
            ErrorKind::Quote if self.start_line != self.line => write!(
                f,
                "extraneous or missing \" in quoted field (line {}, column {}): the quote \
                 opened on line {} is not closed",
                self.line, self.column, self.start_line
            ),
            ErrorKind::Quote => write!(
                f,
                "extraneous or missing \" in quoted field (column {})",
                self.column
            ),
            ErrorKind::FieldCount { expected, found } => write!(
                f,
                "wrong number of fields: expected {expected} (field, type, help), found {found}"
            ),
        }
    }
}

/// Lines as Go's `readLine` gives them: the trailing `\n` kept, `\r\n` turned into `\n`, a
/// `\r` right before the end of the input dropped.
struct Lines<'a> {
    rest: &'a [u8],
    /// Lines read so far (Go's `numLine`).
    num_line: usize,
}

impl<'a> Lines<'a> {
    /// The next line; `None` at the end of the input.
    fn next_line(&mut self) -> Option<Vec<u8>> {
        self.num_line += 1;
        if self.rest.is_empty() {
            return None;
        }
        let (mut line, rest) = match self.rest.iter().position(|&b| b == b'\n') {
            Some(i) => (self.rest[..=i].to_vec(), &self.rest[i + 1..]),
            None => {
                let mut l = self.rest.to_vec();
                if l.last() == Some(&b'\r') {
                    l.pop();
                }
                (l, &self.rest[self.rest.len()..])
            }
        };
        self.rest = rest;
        let n = line.len();
        if n >= 2 && line[n - 2] == b'\r' && line[n - 1] == b'\n' {
            line.truncate(n - 1);
            line[n - 2] = b'\n';
        }
        Some(line)
    }
}

fn length_nl(b: &[u8]) -> usize {
    usize::from(b.last() == Some(&b'\n'))
}

/// Every record of `text`, or the first error Go's `ReadAll` would stop at.
pub(crate) fn read_all(text: &str, fields: usize) -> Result<Vec<Record>, ParseError> {
    let mut lines = Lines {
        rest: text.as_bytes(),
        num_line: 0,
    };
    let mut out = Vec::new();
    while let Some(rec) = read_record(&mut lines)? {
        if rec.fields.len() != fields {
            return Err(ParseError {
                start_line: rec.line,
                line: rec.line,
                column: 1,
                kind: ErrorKind::FieldCount {
                    expected: fields,
                    found: rec.fields.len(),
                },
            });
        }
        out.push(rec);
    }
    Ok(out)
}

/// Where the reader is within a record, for errors.
struct Pos {
    start_line: usize,
    /// The line being read (a quoted field may span lines).
    at_line: usize,
    col: usize,
}

impl Pos {
    fn err(&self, line: usize, column: usize, kind: ErrorKind) -> ParseError {
        ParseError {
            start_line: self.start_line,
            line,
            column,
            kind,
        }
    }
}

fn read_record(lines: &mut Lines) -> Result<Option<Record>, ParseError> {
    // Skip comment and empty lines.
    let mut line = loop {
        match lines.next_line() {
            None => return Ok(None),
            Some(l) if l.first() == Some(&b'#') => continue,
            Some(l) if l.len() == length_nl(&l) => continue,
            Some(l) => break l,
        }
    };
    let start_line = lines.num_line;
    let mut pos = Pos {
        start_line,
        at_line: start_line,
        col: 1,
    };
    let mut fields: Vec<Vec<u8>> = Vec::new();
    loop {
        if line.first() != Some(&b'"') {
            let comma = line.iter().position(|&b| b == b',');
            let end = comma.unwrap_or(line.len() - length_nl(&line));
            let field = &line[..end];
            if let Some(j) = field.iter().position(|&b| b == b'"') {
                return Err(pos.err(lines.num_line, pos.col + j, ErrorKind::BareQuote));
            }
            fields.push(field.to_vec());
            match comma {
                Some(i) => {
                    line.drain(..=i);
                    pos.col += i + 1;
                    continue;
                }
                None => break,
            }
        }
        line.remove(0);
        pos.col += 1;
        let (field, more) = quoted_field(lines, &mut line, &mut pos)?;
        fields.push(field);
        if !more {
            break;
        }
    }
    let fields = fields
        .into_iter()
        // Slices were cut at ASCII bytes of valid UTF-8, so each one is valid UTF-8.
        .map(|f| String::from_utf8_lossy(&f).into_owned())
        .collect();
    Ok(Some(Record {
        line: start_line,
        fields,
    }))
}

/// A quoted field, its opening quote already taken from `line`; true when another field
/// follows it on the record.
fn quoted_field(
    lines: &mut Lines,
    line: &mut Vec<u8>,
    pos: &mut Pos,
) -> Result<(Vec<u8>, bool), ParseError> {
    let mut field = Vec::new();
    loop {
        if let Some(i) = line.iter().position(|&b| b == b'"') {
            field.extend_from_slice(&line[..i]);
            line.drain(..=i);
            pos.col += i + 1;
            match line.first() {
                Some(b'"') => {
                    field.push(b'"');
                    line.remove(0);
                    pos.col += 1;
                }
                Some(b',') => {
                    line.remove(0);
                    pos.col += 1;
                    return Ok((field, true));
                }
                _ if line.len() == length_nl(line) => return Ok((field, false)),
                _ => return Err(pos.err(pos.at_line, pos.col - 1, ErrorKind::Quote)),
            }
        } else if !line.is_empty() {
            // The field goes on on the next line.
            field.extend_from_slice(line);
            pos.col += line.len();
            match lines.next_line() {
                Some(l) => {
                    // A lone '\r' before the end of input reads as an empty line, which
                    // Go does not count.
                    if !l.is_empty() {
                        pos.at_line += 1;
                        pos.col = 1;
                    }
                    *line = l;
                }
                None => *line = Vec::new(),
            }
        } else {
            // The input ended inside the quotes.
            return Err(pos.err(pos.at_line, pos.col, ErrorKind::Quote));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(text: &str) -> Vec<(usize, Vec<String>)> {
        read_all(text, 3)
            .unwrap_or_else(|e| panic!("{e:?}"))
            .into_iter()
            .map(|r| (r.line, r.fields))
            .collect()
    }

    fn v(x: &[&str]) -> Vec<String> {
        x.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn records_comments_blank_lines_and_line_ends() {
        assert_eq!(
            rows("# c\n\na,b,c\r\n\r\n#x\nd, e ,f"),
            vec![(3, v(&["a", "b", "c"])), (6, v(&["d", " e ", "f"]))]
        );
        // A trailing \r before the end of input is dropped; a \r elsewhere is data.
        assert_eq!(rows("a,b,c\r"), vec![(1, v(&["a", "b", "c"]))]);
        assert_eq!(rows("a,b\rx,c\n"), vec![(1, v(&["a", "b\rx", "c"]))]);
        // '#' is a comment only as the first byte of a line.
        assert_eq!(rows(" #a,b,c\n"), vec![(1, v(&[" #a", "b", "c"]))]);
        assert_eq!(read_all("", 3), Ok(vec![]));
    }

    #[test]
    fn quoted_fields() {
        assert_eq!(
            rows("a,b,\"c, d\"\na,\"\"\"q\"\"\",\"multi\r\nline\"\nx,y,\"\"\n"),
            vec![
                (1, v(&["a", "b", "c, d"])),
                (2, v(&["a", "\"q\"", "multi\nline"])),
                (4, v(&["x", "y", ""])),
            ]
        );
        // A comment marker inside a quoted field's continuation is data.
        assert_eq!(
            rows("a,b,\"x\n# y\"\n"),
            vec![(1, v(&["a", "b", "x\n# y"]))]
        );
    }

    #[test]
    fn go_errors() {
        let e = read_all("a, b,\"temp\n", 3).unwrap_err();
        assert_eq!((e.start_line, e.line, e.kind), (1, 1, ErrorKind::Quote));
        let e = read_all("a,b,c\nd, e,\"f\ng\nh", 3).unwrap_err();
        assert_eq!((e.start_line, e.line, e.kind), (2, 4, ErrorKind::Quote));
        assert!(
            e.to_string().contains("opened on line 2 is not closed"),
            "{e}"
        );
        let e = read_all("a,b,\"c\n\r", 3).unwrap_err();
        assert_eq!((e.line, e.column, e.kind), (1, 8, ErrorKind::Quote));
        let e = read_all("a,b,\"c\"d\n", 3).unwrap_err();
        assert_eq!((e.line, e.column, e.kind), (1, 7, ErrorKind::Quote));
        let e = read_all("a, b, \"c, d\"\n", 3).unwrap_err();
        assert_eq!((e.line, e.column, e.kind), (1, 7, ErrorKind::BareQuote));
        let e = read_all("a,b,c\n   \n", 3).unwrap_err();
        assert_eq!(
            (e.line, e.kind),
            (
                2,
                ErrorKind::FieldCount {
                    expected: 3,
                    found: 1
                }
            )
        );
    }
}
