//! The downloader against a local HTTP server (std `TcpListener` on 127.0.0.1) that serves a
//! small body with `Range` support and, on request, misbehaves: wrong bytes, a lying 416, a cut
//! connection, a stall after the headers or before them.

use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use arbor_data::download::{download_verified, DownloadOptions, Expected};
use arbor_data::DataError;
use sha2::{Digest, Sha256};

/// What the server does with one connection.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// 200, or 206 / 416 for a `Range` request, as a correct server would.
    Normal,
    /// 416 to any `Range` request (with `Content-Range: bytes */N` when `total`), 200 otherwise.
    Lying416 { total: bool },
    /// 416 to everything.
    Always416,
    /// 200 with the full `Content-Length`, but only the first bytes, then the connection closes.
    Cut(usize),
    /// 200 with the full `Content-Length` and the first bytes, then nothing for 10 s.
    Stall(usize),
    /// Reads the request and answers nothing for 10 s.
    Silent,
}

/// Requests seen: the `Range` header of each, in order.
type Log = Arc<Mutex<Vec<Option<String>>>>;

/// Serves `body` at the returned URL; connection `i` follows `script[i]` (the last entry
/// repeats).
fn serve(body: &[u8], script: &[Mode]) -> (String, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let log: Log = Arc::default();
    let body = Arc::new(body.to_vec());
    let script = script.to_vec();
    let server_log = Arc::clone(&log);
    thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { continue };
            let mode = script
                .get(i)
                .or(script.last())
                .copied()
                .unwrap_or(Mode::Normal);
            let body = Arc::clone(&body);
            let log = Arc::clone(&server_log);
            thread::spawn(move || {
                let _ = handle(stream, &body, mode, &log);
            });
        }
    });
    (format!("http://{addr}/data/file.bin"), log)
}

fn handle(
    mut stream: TcpStream,
    body: &[u8],
    mode: Mode,
    log: &Mutex<Vec<Option<String>>>,
) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut range = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    log.lock().unwrap().push(range.clone());
    let start: Option<usize> = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|s| s.parse().ok());
    let len = body.len();
    let unsatisfiable = format!("Content-Range: bytes */{len}");
    match mode {
        Mode::Normal => match start {
            None => respond(&mut stream, "200 OK", None, body),
            Some(s) if s < len => respond(
                &mut stream,
                "206 Partial Content",
                Some(&format!("Content-Range: bytes {s}-{}/{len}", len - 1)),
                &body[s..],
            ),
            Some(_) => respond(
                &mut stream,
                "416 Range Not Satisfiable",
                Some(&unsatisfiable),
                b"",
            ),
        },
        Mode::Lying416 { total } => match start {
            None => respond(&mut stream, "200 OK", None, body),
            Some(_) => respond(
                &mut stream,
                "416 Range Not Satisfiable",
                total.then_some(unsatisfiable.as_str()),
                b"",
            ),
        },
        Mode::Always416 => respond(
            &mut stream,
            "416 Range Not Satisfiable",
            Some(&unsatisfiable),
            b"",
        ),
        Mode::Cut(k) | Mode::Stall(k) => {
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
            )?;
            stream.write_all(&body[..k])?;
            stream.flush()?;
            if matches!(mode, Mode::Stall(_)) {
                thread::sleep(Duration::from_secs(10));
            }
            Ok(())
        }
        Mode::Silent => {
            thread::sleep(Duration::from_secs(10));
            Ok(())
        }
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    header: Option<&str>,
    payload: &[u8],
) -> io::Result<()> {
    let extra = header.map(|h| format!("{h}\r\n")).unwrap_or_default();
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
        payload.len()
    )?;
    stream.write_all(payload)?;
    stream.flush()
}

/// 200 000 bytes of deterministic noise (more than one 64 KiB read).
fn body() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..200_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn opts() -> DownloadOptions {
    DownloadOptions {
        progress: false,
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
    }
}

fn sibling(dest: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", dest.display()))
}

fn ranges(log: &Log) -> Vec<Option<String>> {
    log.lock().unwrap().clone()
}

fn expect<'a>(hash: &'a str, body: &[u8]) -> Expected<'a> {
    Expected {
        sha256: Some(hash),
        size: Some(body.len() as u64),
    }
}

fn set_mtime(path: &Path, t: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// Asserts that `e` is the refusal of `dest`: both values, the advice and the URL.
fn assert_refusal(e: &DataError, dest: &Path, url: &str, expected: &str, actual: &str) {
    let msg = e.to_string();
    assert!(matches!(e, DataError::Download { .. }), "{msg}");
    assert!(msg.contains(&dest.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("expected {expected}")), "{msg}");
    assert!(msg.contains(&format!("got {actual}")), "{msg}");
    let corrupt = sibling(dest, ".corrupt");
    assert!(
        msg.contains(&format!("Delete {} and run again", corrupt.display())),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "by hand from {url} and place it at {}",
            dest.display()
        )),
        "{msg}"
    );
}

#[test]
fn complete_download_with_right_hash_and_size_is_kept() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("sub/file.bin");
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(fs::read(&dest).unwrap(), body);
    assert!(!sibling(&dest, ".part").exists());
    assert_eq!(ranges(&log), vec![None]);
    // A second call uses the file without asking the server.
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(ranges(&log).len(), 1);
}

#[test]
fn wrong_hash_is_refused_with_both_hashes_and_advice() {
    let body = body();
    let wrong = sha(b"something else");
    let (url, _log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    let expected = Expected {
        sha256: Some(&wrong),
        size: Some(body.len() as u64),
    };
    let e = download_verified(&url, &dest, expected, &opts()).unwrap_err();
    assert_refusal(&e, &dest, &url, &format!("SHA-256 {wrong}"), &sha(&body));
    assert!(!dest.exists(), "the refused file must not be left in place");
    assert!(!sibling(&dest, ".part").exists());
    assert_eq!(fs::read(sibling(&dest, ".corrupt")).unwrap(), body);
}

#[test]
fn server_announcing_another_size_is_refused_before_downloading() {
    let body = body();
    let (url, _log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    let expected = Expected {
        sha256: None,
        size: Some(body.len() as u64 + 1),
    };
    let e = download_verified(&url, &dest, expected, &opts()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("announces {} bytes", body.len())),
        "{msg}"
    );
    assert!(msg.contains(&format!("{} bytes", body.len() + 1)), "{msg}");
    assert!(msg.contains("by hand from"), "{msg}");
    assert!(!dest.exists() && !sibling(&dest, ".part").exists());
}

#[test]
fn partial_file_is_resumed_with_a_range_request() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    fs::write(sibling(&dest, ".part"), &body[..70_000]).unwrap();
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(fs::read(&dest).unwrap(), body);
    assert_eq!(ranges(&log), vec![Some("bytes=70000-".to_string())]);
}

#[test]
fn cut_connection_keeps_the_part_and_the_next_run_resumes() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, log) = serve(&body, &[Mode::Cut(100_000), Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    let e = download_verified(&url, &dest, expected, &opts()).unwrap_err();
    assert!(e.to_string().contains("kept and resumed"), "{e}");
    assert!(!dest.exists());
    assert_eq!(fs::read(sibling(&dest, ".part")).unwrap(), &body[..100_000]);
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(fs::read(&dest).unwrap(), body);
    assert_eq!(ranges(&log), vec![None, Some("bytes=100000-".to_string())]);
}

#[test]
fn resumed_part_of_another_file_is_discarded_and_downloaded_again() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    fs::write(sibling(&dest, ".part"), vec![0u8; 50_000]).unwrap();
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(fs::read(&dest).unwrap(), body);
    assert_eq!(ranges(&log), vec![Some("bytes=50000-".to_string()), None]);
}

#[test]
fn range_not_satisfiable_with_a_complete_part_is_accepted() {
    let body = body();
    let hash = sha(&body);
    let (url, log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    fs::write(sibling(&dest, ".part"), &body).unwrap();
    // Size unknown here: the total comes from the 416's `Content-Range: bytes */N`.
    let expected = Expected {
        sha256: Some(&hash),
        size: None,
    };
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(fs::read(&dest).unwrap(), body);
    assert_eq!(ranges(&log), vec![Some(format!("bytes={}-", body.len()))]);
}

#[test]
fn range_not_satisfiable_with_a_short_part_starts_again() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, log) = serve(&body, &[Mode::Lying416 { total: true }]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    fs::write(sibling(&dest, ".part"), &body[..1000]).unwrap();
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(fs::read(&dest).unwrap(), body);
    assert_eq!(ranges(&log), vec![Some("bytes=1000-".to_string()), None]);
}

#[test]
fn range_not_satisfiable_without_a_size_is_not_trusted() {
    // No size anywhere (no Content-Range, nothing recorded) and no hash: the short part must
    // not become the file.
    let body = body();
    let (url, log) = serve(&body, &[Mode::Lying416 { total: false }]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    fs::write(sibling(&dest, ".part"), &body[..1000]).unwrap();
    let hash = download_verified(&url, &dest, Expected::default(), &opts()).unwrap();
    assert_eq!(hash, sha(&body));
    assert_eq!(fs::read(&dest).unwrap(), body);
    assert_eq!(ranges(&log), vec![Some("bytes=1000-".to_string()), None]);
}

#[test]
fn range_not_satisfiable_with_a_full_size_wrong_part_is_not_accepted() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    let mut wrong = body.clone();
    wrong[123] ^= 0xff;
    fs::write(sibling(&dest, ".part"), &wrong).unwrap();
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(fs::read(&dest).unwrap(), body);
    assert_eq!(
        ranges(&log),
        vec![Some(format!("bytes={}-", body.len())), None]
    );
}

#[test]
fn server_that_always_answers_416_fails_clearly() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, _log) = serve(&body, &[Mode::Always416]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    fs::write(sibling(&dest, ".part"), &body[..10]).unwrap();
    let e = download_verified(&url, &dest, expected, &opts()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("416"), "{msg}");
    assert!(
        msg.contains(&format!("place the file at {}", dest.display())),
        "{msg}"
    );
    assert!(!dest.exists());
}

#[test]
fn stalled_body_fails_within_the_read_timeout_and_keeps_the_part() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, _log) = serve(&body, &[Mode::Stall(30_000)]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    let o = DownloadOptions {
        read_timeout: Duration::from_secs(1),
        ..opts()
    };
    let t = Instant::now();
    let e = download_verified(&url, &dest, expected, &o).unwrap_err();
    let took = t.elapsed();
    let msg = e.to_string();
    assert!(took < Duration::from_secs(6), "took {took:?}: {msg}");
    assert!(msg.contains("read timeout of 1 s"), "{msg}");
    assert!(msg.contains(&url), "{msg}");
    assert!(!dest.exists());
    assert_eq!(fs::read(sibling(&dest, ".part")).unwrap(), &body[..30_000]);
}

#[test]
fn silent_server_fails_within_the_read_timeout() {
    let body = body();
    let (url, _log) = serve(&body, &[Mode::Silent]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    let o = DownloadOptions {
        read_timeout: Duration::from_secs(1),
        ..opts()
    };
    let t = Instant::now();
    let e = download_verified(&url, &dest, Expected::default(), &o).unwrap_err();
    let took = t.elapsed();
    let msg = e.to_string();
    assert!(took < Duration::from_secs(6), "took {took:?}: {msg}");
    assert!(msg.contains("read timeout of 1 s"), "{msg}");
    assert!(msg.contains(&url), "{msg}");
}

#[test]
fn existing_file_with_a_wrong_hash_is_refused_then_downloaded_again() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    let mut wrong = body.clone();
    wrong[0] ^= 1;
    fs::write(&dest, &wrong).unwrap();
    let e = download_verified(&url, &dest, expected, &opts()).unwrap_err();
    assert_refusal(&e, &dest, &url, &format!("SHA-256 {hash}"), &sha(&wrong));
    assert!(!dest.exists());
    assert!(
        ranges(&log).is_empty(),
        "an existing file is checked, not fetched"
    );
    // Run again: a fresh copy.
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    assert_eq!(fs::read(&dest).unwrap(), body);
}

#[test]
fn existing_file_with_a_wrong_size_is_refused() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    fs::write(&dest, &body[..body.len() - 1]).unwrap();
    let e = download_verified(&url, &dest, expected, &opts()).unwrap_err();
    assert_refusal(
        &e,
        &dest,
        &url,
        &format!("size {} bytes", body.len()),
        &format!("{} bytes", body.len() - 1),
    );
    assert!(!dest.exists() && sibling(&dest, ".corrupt").is_file());
    assert!(ranges(&log).is_empty());
}

#[test]
fn verified_marker_is_trusted_only_while_size_and_mtime_are_unchanged() {
    let body = body();
    let hash = sha(&body);
    let expected = expect(&hash, &body);
    let (url, _log) = serve(&body, &[Mode::Normal]);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("file.bin");
    let marker = sibling(&dest, ".sha256");
    download_verified(&url, &dest, expected, &opts()).unwrap();
    // Just written: an mtime this recent is not trusted, so no marker yet.
    assert!(!marker.exists());
    let old = SystemTime::now() - Duration::from_secs(3600);
    set_mtime(&dest, old);
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    let text = fs::read_to_string(&marker).unwrap();
    assert!(text.starts_with(&format!("{hash}  file.bin\n")), "{text}");
    // Same size and mtime: the cached hash is used (the file is not read again).
    let mut tampered = body.clone();
    tampered[5] ^= 1;
    fs::write(&dest, &tampered).unwrap();
    set_mtime(&dest, old);
    assert_eq!(
        download_verified(&url, &dest, expected, &opts()).unwrap(),
        hash
    );
    // A changed mtime makes it hash the file again, and the change is caught.
    set_mtime(&dest, old + Duration::from_secs(1));
    let e = download_verified(&url, &dest, expected, &opts()).unwrap_err();
    assert_refusal(&e, &dest, &url, &format!("SHA-256 {hash}"), &sha(&tampered));
    assert!(!marker.exists());
}
