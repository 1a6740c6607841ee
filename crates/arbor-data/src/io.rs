//! Line-oriented reading shared by the readers.

use std::fs::File;
use std::io::{BufRead, BufReader};
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

/// Reads `reader` line by line (LF or CRLF), decodes UTF-8 and calls `parse(line_no, text)`.
/// Malformed lines fail or are skipped according to `opts`; `name` is the path used in errors.
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
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| DataError::io(name, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
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
