//! Line-oriented reading shared by the readers.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::{DataError, Loaded, ReadOptions, RecordError};

/// What a line parser decided about one line.
pub(crate) enum LineOutcome<T> {
    /// A record.
    Record(T),
    /// A well-formed line that is not a record (header, filtered label, blank line).
    Filtered,
}

/// Opens `path` for buffered reading.
pub(crate) fn open(path: &Path) -> Result<BufReader<File>, DataError> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|e| DataError::io(path, e))
}

/// The longest line a reader accepts, in bytes. The longest records of the corpora arbor reads
/// are a few KB (a GloVe 300-d vector line about 3 KB, an SNLI JSON line with its parses under
/// 10 KB, a WikiText paragraph under 100 KB); a longer line is refused naming its file and line
/// before it is read whole, so a file of one endless line cannot exhaust memory, and a
/// megabyte-long "sentence" never reaches a model.
pub const MAX_LINE_BYTES: usize = 256 * 1024;

/// Reads `reader` line by line (LF or CRLF), decodes UTF-8 and calls `parse(line_no, text)`.
/// Malformed lines (and lines over [`MAX_LINE_BYTES`]) fail or are skipped according to
/// `opts`; `name` is the path used in errors.
pub(crate) fn read_lines<R: BufRead, T>(
    mut reader: R,
    name: &Path,
    opts: ReadOptions,
    mut parse: impl FnMut(usize, &str) -> Result<LineOutcome<T>, RecordError>,
) -> Result<Loaded<T>, DataError> {
    let mut out = Loaded::default();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| DataError::io(name, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            let err = DataError::record(
                name,
                line_no,
                RecordError::LineTooLong {
                    limit: MAX_LINE_BYTES,
                },
            );
            if !opts.skip_bad {
                return Err(err);
            }
            // Skipped: the rest of the line is read and dropped piece by piece.
            loop {
                buf.clear();
                let n = (&mut reader)
                    .take(MAX_LINE_BYTES as u64)
                    .read_until(b'\n', &mut buf)
                    .map_err(|e| DataError::io(name, e))?;
                if n == 0 || buf.last() == Some(&b'\n') {
                    break;
                }
            }
            out.skipped += 1;
            if out.errors.len() < 10 {
                out.errors.push(err.to_string());
            }
            continue;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        let result = match std::str::from_utf8(&buf) {
            Ok(text) => parse(line_no, text),
            Err(_) => Err(RecordError::InvalidUtf8),
        };
        match result {
            Ok(LineOutcome::Record(r)) => out.records.push(r),
            Ok(LineOutcome::Filtered) => out.filtered += 1,
            Err(kind) => {
                let err = DataError::record(name, line_no, kind);
                if !opts.skip_bad {
                    return Err(err);
                }
                out.skipped += 1;
                if out.errors.len() < 10 {
                    out.errors.push(err.to_string());
                }
            }
        }
    }
    Ok(out)
}

/// Splits on whitespace into owned tokens.
pub(crate) fn tokens(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(text: &[u8], opts: ReadOptions) -> Result<Loaded<String>, DataError> {
        read_lines(text, Path::new("f.txt"), opts, |_, line| {
            Ok(LineOutcome::Record(line.to_string()))
        })
    }

    #[test]
    fn an_overlong_line_is_refused_naming_file_and_line_or_skipped() {
        let mut text = b"short\n".to_vec();
        text.extend(std::iter::repeat_n(b'w', 3 * MAX_LINE_BYTES));
        text.extend(b"\nafter\n");
        let e = lines_of(&text, ReadOptions::strict())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.txt") && e.contains('2') && e.contains("longer than"),
            "{e}"
        );
        let l = lines_of(&text, ReadOptions::lenient()).unwrap();
        assert_eq!(l.records, vec!["short", "after"]);
        assert_eq!(l.skipped, 1);
        // A line of exactly the limit is fine.
        let mut edge = vec![b'x'; MAX_LINE_BYTES];
        edge.push(b'\n');
        assert_eq!(lines_of(&edge, ReadOptions::strict()).unwrap().len(), 1);
    }
}
