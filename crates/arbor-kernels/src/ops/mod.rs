//! The fused ops, one module per op or family of closely related ops. Each module holds, for
//! its ops:
//! - the tensor-level functions models call (re-exported at the crate root), with their shape
//!   checks;
//! - `reference`: the definitions in plain Burn ops, the trait's defaults (re-exported as
//!   [`crate::reference`]);
//! - `cpu`: the loops over contiguous `f32` rows (where the op has its own);
//! - `host`: the CPU backends' entry points, which run `cpu` on the tensors' memory and fall back
//!   to `reference` for other float types;
//! - `autodiff`: the backward step(s) and the functions that record the op as one graph node.
//!
//! The backends only wire these up: `crate::host::host_backend` (Flex, NdArray) and
//! `crate::autodiff` list one line per trait method. Adding an op: a module here, its methods in
//! [`ArborBackend`](crate::ArborBackend), a line in each of those lists, and its re-exports.

pub(crate) mod activation;
pub(crate) mod adjacent;
pub(crate) mod argmax_tree;
pub(crate) mod attention;
pub(crate) mod gated_cell;
pub(crate) mod gumbel_tree;
pub(crate) mod layer_norm;
pub(crate) mod linear;
pub(crate) mod linear_scan;
pub(crate) mod lstm;
pub(crate) mod memory;
pub(crate) mod ordered_cell;
pub(crate) mod rows;
pub(crate) mod select_mix;
pub(crate) mod thin_stack;
pub(crate) mod window;
