//! HTTP: one request for a file ([`fetch`]), resumed with a `Range` header when a partial
//! download is there, written to `<file>.part` with a progress bar, and the errors that say
//! what to do when the network or the server fails.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Duration;

use super::verify::Expected;
use super::{remove_if_present, DownloadOptions};
use crate::error::DataError;

fn offline_message(url: &str, dest: &Path, err: &str) -> String {
    format!(
        "could not download {url} ({err}).\nIf this machine is offline, download that URL \
         elsewhere and place the file at {}\n(a partial {}.part is resumed when present), then \
         run again. See datasets/README.md.",
        dest.display(),
        dest.display()
    )
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Outcome of one HTTP request.
pub(super) enum Fetched {
    /// `.part` holds the whole body (`resumed`: part of it came from an earlier run).
    Done { resumed: bool },
    /// The partial file cannot be completed; discard it and start again (the reason, in words).
    Restart(String),
}

/// `Content-Range: bytes START-END/TOTAL` (or `bytes */TOTAL`): (START, TOTAL), each when given.
fn content_range(value: &str) -> (Option<u64>, Option<u64>) {
    let Some(rest) = value.trim().strip_prefix("bytes") else {
        return (None, None);
    };
    let Some((range, total)) = rest.trim().split_once('/') else {
        return (None, None);
    };
    let start = range
        .split_once('-')
        .and_then(|(s, _)| s.trim().parse().ok());
    (start, total.trim().parse().ok())
}

/// Whether an error (or one of its causes) is an I/O timeout.
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            if matches!(
                io.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ) {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

fn announced_mismatch(url: &str, dest: &Path, announced: u64, size: u64) -> DataError {
    DataError::Download {
        url: url.to_string(),
        message: format!(
            "the server announces {announced} bytes but the recorded size of {} is {size} bytes, \
             so it is serving a different file; nothing was kept. Download the file by hand from \
             {url} (or a trusted mirror of the same version) and place it at {}.",
            dest.display(),
            dest.display()
        ),
    }
}

/// One request for `url`, appending to `part` (which holds `have` bytes) when the server
/// honours the `Range` header.
pub(super) fn fetch(
    url: &str,
    dest: &Path,
    part: &Path,
    have: u64,
    expected: Expected<'_>,
    opts: &DownloadOptions,
) -> Result<Fetched, DataError> {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(opts.connect_timeout)
        .timeout_read(opts.read_timeout)
        .timeout_write(opts.read_timeout)
        .build();
    let mut req = agent.get(url);
    if have > 0 {
        req = req.set("Range", &format!("bytes={have}-"));
    }
    let resp = match req.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(416, r)) if have > 0 => {
            let announced = r.header("Content-Range").and_then(|v| content_range(v).1);
            if let (Some(a), Some(size)) = (announced, expected.size) {
                if a != size {
                    remove_if_present(part)?;
                    return Err(announced_mismatch(url, dest, a, size));
                }
            }
            return Ok(match announced.or(expected.size) {
                Some(total) if total == have => Fetched::Done { resumed: true },
                Some(total) => Fetched::Restart(format!(
                    "{url} answered 416 (range not satisfiable) to a resume from byte {have}, \
                     but the file has {total} bytes"
                )),
                None => Fetched::Restart(format!(
                    "{url} answered 416 (range not satisfiable) to a resume from byte {have} \
                     without saying the file's size"
                )),
            });
        }
        Err(ureq::Error::Status(code, r)) => {
            return Err(DataError::Download {
                url: url.to_string(),
                message: offline_message(url, dest, &format!("HTTP {code} {}", r.status_text())),
            })
        }
        Err(e) => {
            let why = if is_timeout(&e) {
                format!(
                    "no answer within the read timeout of {}: {e}",
                    seconds(opts.read_timeout)
                )
            } else {
                e.to_string()
            };
            return Err(DataError::Download {
                url: url.to_string(),
                message: offline_message(url, dest, &why),
            });
        }
    };
    let length: Option<u64> = resp
        .header("Content-Length")
        .and_then(|v| v.trim().parse().ok());
    let resumed = resp.status() == 206;
    let total = if resumed {
        let (start, total) = resp
            .header("Content-Range")
            .map(content_range)
            .unwrap_or((None, None));
        if start != Some(have) {
            return Ok(Fetched::Restart(format!(
                "{url} answered a resume from byte {have} with another range ({})",
                resp.header("Content-Range").unwrap_or("no Content-Range")
            )));
        }
        total.or(length.map(|l| have + l))
    } else {
        length
    };
    if let (Some(t), Some(size)) = (total, expected.size) {
        if t != size {
            remove_if_present(part)?;
            return Err(announced_mismatch(url, dest, t, size));
        }
    }
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .append(resumed)
        .truncate(!resumed)
        .open(part)
        .map_err(|e| DataError::io(part, e))?;
    let start = if resumed { have } else { 0 };
    let bar = opts
        .progress
        .then(|| progress_bar(dest, total.map(|t| t.max(start)), start));
    let mut reader = resp.into_reader();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = file.flush();
                let why = if is_timeout(&e) {
                    format!(
                        "no data for the read timeout of {}",
                        seconds(opts.read_timeout)
                    )
                } else {
                    format!("connection lost ({e})")
                };
                return Err(DataError::Download {
                    url: url.to_string(),
                    message: format!(
                        "{why}; the partial file {} ({} bytes) is kept and resumed on the next \
                         run",
                        part.display(),
                        start + got
                    ),
                });
            }
        };
        file.write_all(&buf[..n])
            .map_err(|e| DataError::io(part, e))?;
        got += n as u64;
        if let Some(b) = &bar {
            b.inc(n as u64);
        }
    }
    file.flush().map_err(|e| DataError::io(part, e))?;
    if let Some(b) = bar {
        b.finish();
    }
    if let Some(len) = length {
        if got != len {
            return Err(DataError::Download {
                url: url.to_string(),
                message: format!(
                    "the connection closed after {got} of {len} bytes; the partial file {} is \
                     kept and resumed on the next run",
                    part.display()
                ),
            });
        }
    }
    Ok(Fetched::Done { resumed })
}

fn progress_bar(dest: &Path, total: Option<u64>, start: u64) -> indicatif::ProgressBar {
    let bar = match total {
        Some(t) => indicatif::ProgressBar::new(t),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(
        dest.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    bar.set_position(start);
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_parsing() {
        assert_eq!(content_range("bytes */1234"), (None, Some(1234)));
        assert_eq!(content_range("bytes 10-99/100"), (Some(10), Some(100)));
        assert_eq!(content_range("bytes 10-99/*"), (Some(10), None));
        assert_eq!(content_range("items 1-2/3"), (None, None));
        assert_eq!(content_range(""), (None, None));
    }
}
