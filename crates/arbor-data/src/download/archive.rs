//! Zip extraction ([`unzip`]).

use std::fs::{self, File};
use std::io;
use std::path::Path;

use crate::error::DataError;

/// Extracts a zip archive into `dir` (entries with unsafe paths are skipped).
pub fn unzip(archive: &Path, dir: &Path) -> Result<usize, DataError> {
    let f = File::open(archive).map_err(|e| DataError::io(archive, e))?;
    let mut z = zip::ZipArchive::new(f).map_err(|e| {
        DataError::Invalid(format!("{}: not a zip archive: {e}", archive.display()))
    })?;
    let mut n = 0;
    for i in 0..z.len() {
        let mut entry = z
            .by_index(i)
            .map_err(|e| DataError::Invalid(format!("{}: {e}", archive.display())))?;
        let Some(rel) = entry.enclosed_name() else {
            continue;
        };
        let out = dir.join(rel);
        if entry.is_dir() {
            fs::create_dir_all(&out).map_err(|e| DataError::io(&out, e))?;
            continue;
        }
        if let Some(p) = out.parent() {
            fs::create_dir_all(p).map_err(|e| DataError::io(p, e))?;
        }
        let mut w = File::create(&out).map_err(|e| DataError::io(&out, e))?;
        io::copy(&mut entry, &mut w).map_err(|e| DataError::io(&out, e))?;
        n += 1;
    }
    Ok(n)
}
