//! Untrusted PyTorch files are read within bounds (issue 35): the "memo bomb" (a small pickle
//! whose shared references a copying reader expands without end) and a pickle nested a million
//! deep are refused with an error naming the limit, as bare pickles and inside a `torch.save`
//! zip archive, while real `torch.save` files of both formats (zip and legacy) still read.

use std::io::Write;
use std::path::Path;

use arbor_convert::{PickleLimits, StateDict};

/// A protocol-2 pickle of `levels` lists, each holding the previous one twice by memo reference.
fn memo_bomb(levels: u8) -> Vec<u8> {
    let mut p = vec![0x80, 2, b']', b'q', 0];
    for level in 1..=levels {
        p.extend([
            b']',
            b'(',
            b'h',
            level - 1,
            b'h',
            level - 1,
            b'e',
            b'q',
            level,
        ]);
    }
    p.push(b'.');
    p
}

/// `depth` nested lists.
fn nested(depth: usize) -> Vec<u8> {
    let mut p = vec![0x80, 2];
    p.extend(std::iter::repeat_n(b']', depth));
    p.extend(std::iter::repeat_n(b'a', depth - 1));
    p.push(b'.');
    p
}

/// A `torch.save`-style zip archive holding `pickle` as `archive/data.pkl`.
fn zipped(path: &Path, pickle: &[u8]) {
    let file = std::fs::File::create(path).unwrap();
    let mut z = zip::ZipWriter::new(file);
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    z.start_file("archive/data.pkl", stored).unwrap();
    z.write_all(pickle).unwrap();
    z.start_file("archive/version", stored).unwrap();
    z.write_all(b"3\n").unwrap();
    z.finish().unwrap();
}

fn refused(path: &Path, needle: &str) {
    let started = std::time::Instant::now();
    let e = StateDict::read(path).unwrap_err().to_string();
    assert!(e.contains(needle), "{}: {e}", path.display());
    assert!(e.contains(&path.display().to_string()), "{e}");
    // Refused by the walk, before anything is built (the unbounded reader took 13 s and 8 GB).
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
}

#[test]
fn the_memo_bomb_is_refused_bare_and_zipped() {
    let dir = tempfile::tempdir().unwrap();
    let bare = dir.path().join("bomb.pt");
    std::fs::write(&bare, memo_bomb(64)).unwrap();
    assert!(std::fs::metadata(&bare).unwrap().len() < 1500);
    refused(&bare, "memo references are copied");
    let zip = dir.path().join("bomb-zip.pt");
    zipped(&zip, &memo_bomb(64));
    refused(&zip, "memo references are copied");
}

#[test]
fn a_million_nested_lists_are_refused_without_overflowing_the_stack() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.pt");
    std::fs::write(&deep, nested(1_000_000)).unwrap();
    refused(&deep, "nests containers more than 256 deep");
    let zip = dir.path().join("deep-zip.pt");
    zipped(&zip, &nested(1_000_000));
    refused(&zip, "nests containers");
}

#[test]
fn the_limits_are_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("big.pt");
    zipped(&zip, &nested(100));
    let tight = PickleLimits {
        max_pickle_bytes: 64,
        ..PickleLimits::default()
    };
    let e = StateDict::read_with(&zip, &tight).unwrap_err().to_string();
    assert!(e.contains("over the limit of 64 bytes"), "{e}");
    let shallow = PickleLimits {
        max_depth: 50,
        ..PickleLimits::default()
    };
    let e = StateDict::read_with(&zip, &shallow)
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than 50 deep"), "{e}");
}

/// Real `torch.save` output, both formats, written by PyTorch here (skipped without it).
#[test]
fn real_torch_files_of_both_formats_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import sys, torch
sd = {"layer.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
      "layer.bias": torch.ones(2), "shared": [torch.zeros(1)] * 3}
torch.save(sd, sys.argv[1])
torch.save(sd, sys.argv[2], _use_new_zipfile_serialization=False)
"#;
    let zip = dir.path().join("zip.pt");
    let legacy = dir.path().join("legacy.pt");
    let ran = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&zip)
        .arg(&legacy)
        .output();
    match ran {
        Ok(o) if o.status.success() => {}
        _ => {
            eprintln!("skipped: no python3 with torch on this machine");
            return;
        }
    }
    for path in [&zip, &legacy] {
        let sd = StateDict::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            sd.shape("layer.weight"),
            Some(&[2usize, 3][..]),
            "{}",
            path.display()
        );
        assert_eq!(sd.shape("layer.bias"), Some(&[2usize][..]));
    }
}
