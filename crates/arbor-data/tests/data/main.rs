//! The data layer: readers' properties, distance trees, the downloader against a local HTTP server,
//! and the real corpora in `../shared/data` where present.
//!
//! One test binary for the crate (issue 34, item 8): each module was a binary of its own, and every
//! binary links Burn again. Modules that draw from the backend's process-wide generator and need
//! its values take the lock their module always took.

mod distance_trees;
mod download_http;
mod properties;
mod real_data;
