pub use arbor_cells as cells;
