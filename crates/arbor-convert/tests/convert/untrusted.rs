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

mod fuzz {
    //! The PyTorch and safetensors readers on damaged files: a real `torch.save` archive with
    //! random bytes changed or cut short, and random bytes: an error or a state dict, never a
    //! panic, and never a long time.

    use super::*;
    use proptest::prelude::*;

    fn fixture() -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/gumbel-snli-affine/state_dict.pt");
        std::fs::read(path).unwrap()
    }

    /// Reads `bytes` as a file named `name`; fails the property on a panic.
    fn read_never_panics(bytes: &[u8], name: &str) -> Result<(), TestCaseError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let read = std::panic::catch_unwind(|| StateDict::read(&path).map(|_| ()));
        prop_assert!(
            read.is_ok(),
            "StateDict::read panicked on {} bytes",
            bytes.len()
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 64,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn a_damaged_torch_archive_is_an_error_not_a_panic(
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let mut bytes = fixture();
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            if truncate {
                let n = cut.index(bytes.len());
                bytes.truncate(n);
            }
            read_never_panics(&bytes, "damaged.pt")?;
        }

        #[test]
        fn a_damaged_pickle_in_a_sound_archive_is_an_error_not_a_panic(
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        ) {
            // The archive's own checksums would catch flips in the zip; re-zipping a damaged
            // data.pkl sends it to the pickle walk and Burn's reader.
            let mut archive = zip::ZipArchive::new(std::io::Cursor::new(fixture())).unwrap();
            let mut files = Vec::new();
            for i in 0..archive.len() {
                let mut f = archive.by_index(i).unwrap();
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut data).unwrap();
                files.push((f.name().to_string(), data));
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("pickle-damaged.pt");
            let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
            let stored = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Stored);
            for (name, mut data) in files {
                if name.ends_with("data.pkl") {
                    for (at, value) in &flips {
                        let i = at.index(data.len());
                        data[i] = *value;
                    }
                }
                z.start_file(name, stored).unwrap();
                z.write_all(&data).unwrap();
            }
            z.finish().unwrap();
            let bytes = std::fs::read(&path).unwrap();
            read_never_panics(&bytes, "pickle-damaged.pt")?;
        }

        #[test]
        fn random_bytes_are_an_error_not_a_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..600),
            pickle in any::<bool>(),
        ) {
            let mut bytes = bytes;
            if pickle && !bytes.is_empty() {
                // Often a pickle header, so the walk goes past the first byte.
                bytes.splice(0..0, [0x80, 2]);
            }
            read_never_panics(&bytes, "random.pt")?;
            read_never_panics(&bytes, "random.safetensors")?;
        }
    }
}

/// The oldest `torch.save` format, a tar archive of `sys_info`, `pickle` and `storages`: its
/// pickle is walked too (a memo bomb in it is refused), and a sound one is not refused by the
/// walk (whatever Burn's reader then says of it).
#[test]
fn a_tar_format_file_has_its_pickle_walked() {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &Path, pickle: &[u8]| {
        let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
        for (name, data) in [
            ("sys_info", &[0x80u8, 2, b'}', b'.'][..]),
            ("pickle", pickle),
            ("storages", &[0x80u8, 2, b']', b'.'][..]),
        ] {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, data).unwrap();
        }
        b.finish().unwrap();
    };
    let bomb = dir.path().join("bomb-tar.pt");
    write(&bomb, &memo_bomb(64));
    refused(&bomb, "pickle: the pickle would make the reader allocate");
    let sound = dir.path().join("sound-tar.pt");
    write(&sound, &[0x80, 2, b'}', b'.']);
    let e = StateDict::read(&sound)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(!e.contains("unknown pickle opcode"), "{e}");
}

/// A legacy-format file (PyTorch ≤ 1.5: magic number, protocol, system info, then the object, as
/// pickles in a row) with a memo bomb as its object: the walk goes past the header pickles.
#[test]
fn a_legacy_format_file_has_its_object_pickle_walked() {
    let mut bytes = vec![0x80, 2, 0x8a, 10];
    bytes.extend([0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19]);
    bytes.push(b'.'); // the magic number
    bytes.extend([0x80, 2, b'M', 0xe9, 0x03, b'.']); // protocol 1001
    bytes.extend([0x80, 2, b'}', b'.']); // system info
    bytes.extend(memo_bomb(64)); // the object
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legacy-bomb.pt");
    std::fs::write(&path, bytes).unwrap();
    refused(&path, "memo references are copied");
}
