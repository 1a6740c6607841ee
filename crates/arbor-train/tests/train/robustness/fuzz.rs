//! Damaged checkpoints: errors, never panics.

use std::sync::OnceLock;

use arbor_train::*;
use burn::backend::Flex;
use proptest::prelude::*;

use super::support::{config, fresh, serial, Mlp, Probe};

/// The bytes of a real `last.ckpt` (a two-step run).
fn real_checkpoint() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let _guard = serial();
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        c.max_steps = Some(2);
        train(&Probe::new(7), fresh(1), &c, &Default::default()).unwrap();
        std::fs::read(c.last_checkpoint()).unwrap()
    })
}

/// Every loader refuses `bytes`, without panicking: the file reader, the model loader and
/// a resume.
fn all_refuse(bytes: &[u8]) -> Result<(), TestCaseError> {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("last.ckpt");
    std::fs::write(&path, bytes).unwrap();
    prop_assert!(CheckpointFile::load(&path).is_err());
    let model = load_model::<Flex, _>(
        Mlp::<Flex>::new(&Default::default()),
        &path,
        &Default::default(),
    );
    prop_assert!(model.is_err());
    let mut c = config(dir.path());
    c.resume = true;
    let err = train(&Probe::new(7), fresh(1), &c, &Default::default()).unwrap_err();
    prop_assert!(err.to_string().contains("last.ckpt"), "{}", err);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_refused(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        magic in any::<bool>(),
    ) {
        let mut data = if magic { b"ARBOR-CKPT v1\n".to_vec() } else { Vec::new() };
        data.extend(bytes);
        all_refuse(&data)?;
    }

    #[test]
    fn truncations_are_refused(cut in 0.0f64..1.0) {
        let real = real_checkpoint();
        let len = ((real.len() as f64) * cut) as usize;
        all_refuse(&real[..len.min(real.len() - 1)])?;
    }

    #[test]
    fn bit_flips_are_refused(flips in proptest::collection::vec((0.0f64..1.0, 0u8..8), 1..4)) {
        let mut data = real_checkpoint().to_vec();
        let mut seen = std::collections::HashSet::new();
        for (at, bit) in flips {
            let i = ((data.len() as f64) * at) as usize % data.len();
            // Flipping the same bit twice would restore it.
            if seen.insert((i, bit)) {
                data[i] ^= 1 << bit;
            }
        }
        all_refuse(&data)?;
    }

    /// A corrupted body with a recomputed checksum reaches Burn's record decoder (which
    /// panics on some malformed records): loading the model or resuming may succeed (other
    /// weights) or fail, but never panics.
    #[test]
    fn resealed_corruption_never_panics(at in 0.0f64..1.0, byte in any::<u8>()) {
        let real = real_checkpoint();
        let body_end = real.len() - 4;
        let mut data = real[..body_end].to_vec();
        // Past the magic line and the metadata length.
        let i = 22 + ((((body_end - 22) as f64) * at) as usize).min(body_end - 23);
        data[i] = byte;
        let crc = crc32(&data);
        data.extend_from_slice(&crc.to_le_bytes());
        let _guard = serial();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("last.ckpt");
        std::fs::write(&path, &data).unwrap();
        let _ = load_model::<Flex, _>(
            Mlp::<Flex>::new(&Default::default()),
            &path,
            &Default::default(),
        );
        let mut c = config(dir.path());
        c.resume = true;
        c.max_steps = Some(3);
        // Refused, or stopped by the damaged weights (a non-finite loss), or trained on.
        let _ = train(&Probe::new(7), fresh(1), &c, &Default::default());
    }
}

/// CRC-32 (IEEE), as the checkpoint format uses.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
