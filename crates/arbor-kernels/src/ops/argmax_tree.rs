//! `argmax_tree`: a whole evaluation (argmax) pass of the Gumbel Tree-LSTM's bottom-up layers
//! as one op on the CPU backends.

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{TensorData, TensorPrimitive};

use crate::{ArborBackend, GateLayout};

/// What the Gumbel Tree-LSTM's fused passes return: [`argmax_tree`] (evaluation) and
/// [`crate::st_gumbel_tree`] (training).
#[derive(Debug, Clone)]
pub struct TreePass<B: Backend> {
    /// Every sentence's root `h` `[batch, D]` (a one-token sentence's root is its leaf).
    pub root_h: Tensor<B, 2>,
    /// Every sentence's root `c` `[batch, D]`.
    pub root_c: Tensor<B, 2>,
    /// The `h` of the parent selected at each layer `[batch, n − 1, D]`; zeros once an
    /// example's tree is complete.
    pub chosen: Tensor<B, 3>,
    /// The index selected at each layer `[batch, n − 1]` (the position of the merged pair among
    /// the layer's `n − t − 1` pairs); 0 once an example's tree is complete.
    pub selected: Tensor<B, 2, Int>,
    /// The selection distribution at each layer `[batch, n − 1, n − 1]`: the softmax of the
    /// valid candidates' scores ([`argmax_tree`]) or the Gumbel-softmax `y`, without a gradient
    /// path ([`crate::st_gumbel_tree`]). Layer `t` in row `t`, its `n − 1 − t` pairs in columns
    /// `0..n − 1 − t`; zeros elsewhere, on invalid pairs and once an example's tree is complete.
    pub probabilities: Tensor<B, 3>,
}

/// What a backend's [`ArborBackend::argmax_tree`] returns: [`TreePass`]'s tensors as
/// primitives, the selections as `[batch, n − 1]` row-major indices.
#[derive(Debug)]
pub struct ArgmaxTreeParts<B: Backend> {
    /// [`TreePass::root_h`].
    pub root_h: FloatTensor<B>,
    /// [`TreePass::root_c`].
    pub root_c: FloatTensor<B>,
    /// [`TreePass::chosen`].
    pub chosen: FloatTensor<B>,
    /// [`TreePass::selected`], row-major.
    pub selected: Vec<i64>,
    /// [`TreePass::probabilities`].
    pub probabilities: FloatTensor<B>,
}

/// The Gumbel Tree-LSTM's bottom-up layers with argmax decisions (Choi, Yoo & Lee 2018, at
/// evaluation) as one op, or `None` where the backend has no such op (the caller then runs the
/// layers as tensor ops): the CPU backends on `f32` data have it; autodiff backends (whose
/// callers may want gradients), CUDA and other float types do not.
///
/// At each layer every adjacent pair `(l, r)` of the current nodes has a candidate parent from
/// the binary Tree-LSTM `[gates] = [h_l; h_r]·W + b` (`layout`: the blocks of the input,
/// forget-left, forget-right, output and candidate gates), `c = σ(i)⊙tanh(g) + σ(f_l)⊙c_l +
/// σ(f_r)⊙c_r`, `h = σ(o)⊙tanh(c)`, scored `q·h / √D`; the first pair of highest score is
/// merged. Only the two pairs around the merged node are new at the next layer, so the op
/// keeps every other candidate and composes `2·batch` pairs per layer (`O(n)` compositions per
/// sentence), and keeps the nodes in place (a linked list) instead of shifting them. The
/// result is that of composing every pair at every layer, to rounding.
///
/// # Shapes
/// - `leaf_h`, `leaf_c`: `[batch, n, D]`; positions past an example's length are not read
/// - `weight`: `[2D, 5D]` (Burn's `[in, out]`), `bias`: `[5D]`, `query`: `[D]`
/// - `lengths`: `batch` entries in `1..=n`
/// - output: see [`TreePass`]
///
/// # Panics
/// If the shapes disagree, `layout` is not five blocks, or a length is outside `1..=n`.
pub fn argmax_tree<B: ArborBackend>(
    leaf_h: Tensor<B, 3>,
    leaf_c: Tensor<B, 3>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    query: Tensor<B, 1>,
    lengths: &[usize],
    layout: &GateLayout,
) -> Option<TreePass<B>> {
    let [batch, n, d] = leaf_h.dims();
    assert_eq!(leaf_c.dims(), [batch, n, d], "argmax_tree: leaf_c's shape");
    assert_eq!(weight.dims(), [2 * d, 5 * d], "argmax_tree: weight's shape");
    if let Some(b) = &bias {
        assert_eq!(b.dims(), [5 * d], "argmax_tree: bias's shape");
    }
    assert_eq!(query.dims(), [d], "argmax_tree: query's shape");
    assert!(
        layout.is_valid() && layout.blocks == 5 && layout.forgets.len() == 2,
        "argmax_tree: a binary Tree-LSTM layout has five blocks and two forget gates: {layout:?}"
    );
    assert!(
        lengths.len() == batch && lengths.iter().all(|&l| (1..=n).contains(&l)),
        "argmax_tree: {} lengths for {batch} rows of {n} nodes: {lengths:?}",
        lengths.len()
    );
    let device = leaf_h.device();
    let p = |t: Tensor<B, 3>| t.into_primitive().tensor();
    let parts = B::argmax_tree(
        p(leaf_h),
        p(leaf_c),
        weight.into_primitive().tensor(),
        bias.map(|b| b.into_primitive().tensor()),
        query.into_primitive().tensor(),
        lengths,
        layout,
    )?;
    fn float<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
        Tensor::from_primitive(TensorPrimitive::Float(t))
    }
    let layers = n.saturating_sub(1);
    Some(TreePass {
        root_h: float(parts.root_h),
        root_c: float(parts.root_c),
        chosen: float(parts.chosen),
        selected: Tensor::from_data(TensorData::new(parts.selected, [batch, layers]), &device),
        probabilities: float(parts.probabilities),
    })
}

/// The CPU loops: the layers over `f32` rows.
pub(crate) mod cpu {
    use crate::host::Rows;
    use crate::ops::gated_cell::cpu::{gated_cell, gated_output};
    use crate::packed::{PackedRhs, Start};
    use crate::par;
    use crate::GateLayout;

    /// No node (the end of a linked list).
    const NONE: usize = usize::MAX;

    /// The inputs of [`argmax_tree`]: the leaves `[batch, n, D]`, the composition's weight as
    /// `(slice, row stride, column stride)` of its `[2D, 5D]` matrix, the bias `[5D]` and the
    /// query `[D]`.
    pub(crate) struct Inputs<'a> {
        pub(crate) leaf_h: Rows<'a>,
        pub(crate) leaf_c: Rows<'a>,
        pub(crate) weight: (&'a [f32], usize, usize),
        pub(crate) bias: Option<&'a [f32]>,
        pub(crate) query: &'a [f32],
        pub(crate) lengths: &'a [usize],
        pub(crate) n: usize,
        pub(crate) d: usize,
    }

    /// [`super::argmax_tree`]'s outputs, row-major: root `h`, root `c` (`[batch, D]` each),
    /// chosen parents `[batch, n − 1, D]`, selections `[batch, n − 1]`, probabilities
    /// `[batch, n − 1, n − 1]`.
    pub(crate) struct Outputs {
        pub(crate) root_h: Vec<f32>,
        pub(crate) root_c: Vec<f32>,
        pub(crate) chosen: Vec<f32>,
        pub(crate) selected: Vec<i64>,
        pub(crate) probabilities: Vec<f32>,
    }

    /// See [`super::argmax_tree`]. The nodes of all sentences are rows of one compact buffer
    /// (sentence `b`'s at `start[b]..start[b] + len`) and stay there: merging pair `(p, q)`
    /// writes the parent at `p` and unlinks `q`; the candidate of pair `(p, next(p))` is kept at
    /// `p`.
    ///
    /// A pair's gates are `[h_l; h_r]·W + b = (h_l·W_l + b) + h_r·W_r` with `W_l`, `W_r` the
    /// top and bottom halves of `W`. Every node's right projection `h·W_r` is computed once,
    /// when it appears (every leaf in one product, then the merged node of each sentence and
    /// layer), and kept; the left one is computed for each new pair, as its gates are
    /// composed: `D·15D` multiply-adds per new node instead of `2·(2D·5D)` for the two new
    /// pairs around it. Keeping both projections would save a third of that, but they were
    /// the pass's largest buffers (`[nodes, 5D]` each, 11.7 MB at the bench's d300 batch),
    /// and the nodes' `h` that replace the left ones are a fifth of the size. The sums are in
    /// another order than one product over `[h_l; h_r]`: the same values to rounding.
    pub(crate) fn argmax_tree(x: &Inputs<'_>, layout: &GateLayout) -> Outputs {
        let (n, d) = (x.n, x.d);
        let w = 5 * d;
        let batch = x.lengths.len();
        let layers = n.saturating_sub(1);
        let mut start = Vec::with_capacity(batch);
        let mut total = 0;
        for &len in x.lengths {
            start.push(total);
            total += len;
        }
        // Nodes' `h` (for their left projections) and `c` (read as children).
        let (mut h, mut c) = (Vec::with_capacity(total * d), Vec::with_capacity(total * d));
        for (b, &len) in x.lengths.iter().enumerate() {
            x.leaf_h.extend(b * n, len, &mut h);
            x.leaf_c.extend(b * n, len, &mut c);
        }
        let (mut cand_h, mut cand_c) = (vec![0f32; total * d], vec![0f32; total * d]);
        let mut score = vec![0f32; total];
        let mut next = vec![NONE; total];
        let mut prev = vec![NONE; total];
        for (&s0, &len) in start.iter().zip(x.lengths) {
            for i in s0..s0 + len {
                if i + 1 < s0 + len {
                    next[i] = i + 1;
                }
                if i > s0 {
                    prev[i] = i - 1;
                }
            }
        }
        // `W_l` and `W_r` packed once for the pass: every layer multiplies a few rows (the
        // merged nodes, at most one per sentence) by both, which `gemm` would repack each time.
        let halves = Halves::new(x.weight, d);
        // Every leaf's right projection, in one product.
        let mut right = vec![0f32; total * w];
        halves
            .right
            .product(total, &mut right, w, false, &h, (d, 1));
        let mut out = Outputs {
            root_h: vec![0f32; batch * d],
            root_c: vec![0f32; batch * d],
            chosen: vec![0f32; batch * layers * d],
            selected: vec![0i64; batch * layers],
            probabilities: vec![0f32; batch * layers * layers],
        };
        let mut scratch = Scratch::default();
        // Layer 0: every adjacent pair of every example (`(left, right)` node rows).
        let mut todo: Vec<(usize, usize)> = start
            .iter()
            .zip(x.lengths)
            .flat_map(|(&s0, &len)| (s0..s0 + len.saturating_sub(1)).map(|i| (i, i + 1)))
            .collect();
        let mut merged = Vec::with_capacity(batch);
        let mut row_scores = vec![0f32; layers];
        for t in 0..layers {
            compose(
                x,
                layout,
                (&todo, &merged),
                (&halves, &mut right),
                (&h, &c),
                &mut cand_h,
                &mut cand_c,
                &mut score,
                &mut scratch,
            );
            todo.clear();
            merged.clear();
            for (b, (&s0, &len)) in start.iter().zip(x.lengths).enumerate() {
                if len < t + 2 {
                    continue; // complete: no selection, zeros
                }
                // The layer's pairs in order along the list from node 0.
                let k = len - t - 1;
                let mut at = s0;
                let (mut best, mut best_at, mut best_score) = (0, at, f32::NAN);
                for (j, s) in row_scores[..k].iter_mut().enumerate() {
                    *s = score[at];
                    // The first of the highest scores, as an argmax; a NaN is never higher.
                    if j == 0 || *s > best_score {
                        (best, best_at, best_score) = (j, at, *s);
                    }
                    at = next[at];
                }
                softmax(
                    &row_scores[..k],
                    &mut out.probabilities[(b * layers + t) * layers..][..k],
                );
                out.selected[b * layers + t] = best as i64;
                // Merge `(best_at, q)`: the parent takes `best_at`'s place, `q` leaves the list.
                let p = best_at;
                let q = next[p];
                h[p * d..(p + 1) * d].copy_from_slice(&cand_h[p * d..(p + 1) * d]);
                c[p * d..(p + 1) * d].copy_from_slice(&cand_c[p * d..(p + 1) * d]);
                out.chosen[(b * layers + t) * d..][..d]
                    .copy_from_slice(&cand_h[p * d..(p + 1) * d]);
                let after = next[q];
                next[p] = after;
                if after != NONE {
                    prev[after] = p;
                }
                if prev[p] != NONE {
                    todo.push((prev[p], p));
                }
                if after != NONE {
                    todo.push((p, after));
                }
                if prev[p] != NONE || after != NONE {
                    merged.push(p);
                }
            }
        }
        for (b, (&s0, &len)) in start.iter().zip(x.lengths).enumerate() {
            // A sentence's first node is never unlinked: it is the root at the end, the parent
            // of the last merge (whose candidate slot nothing overwrites after it), or the leaf.
            let root_h = if len > 1 {
                &cand_h[s0 * d..(s0 + 1) * d]
            } else {
                x.leaf_h.row(b * n)
            };
            out.root_h[b * d..(b + 1) * d].copy_from_slice(root_h);
            out.root_c[b * d..(b + 1) * d].copy_from_slice(&c[s0 * d..(s0 + 1) * d]);
        }
        out
    }

    /// Work buffers of `compose`, reused across layers: a block of pairs' left nodes' `h` and
    /// projections (`h`, `left`), the merged nodes' `h` and right projections (`merged_h`,
    /// `right`), and the block's candidates' `c` and `h` (`c`, `cand`).
    #[derive(Default)]
    struct Scratch {
        h: Vec<f32>,
        left: Vec<f32>,
        merged_h: Vec<f32>,
        right: Vec<f32>,
        c: Vec<f32>,
        cand: Vec<f32>,
    }

    /// The elements of work ([`par::rows`]) in composing one pair of `D` units: the sum of
    /// its `5D` gates, their activations (each an `exp` and a division, several elements'
    /// worth) and the cell's update. Counting the gates once kept a layer of 16 sentences'
    /// pairs (32 rows) on one thread.
    pub(crate) fn pair_cost(d: usize) -> usize {
        3 * 5 * d + 3 * d
    }

    /// The composition's weight `[2D, 5D]` as its two halves `W_l = W[..D]` and `W_r =
    /// W[D..]` (`[D, 5D]` each), or their transposes, packed once for the many small products
    /// of a pass (at most a few rows per sentence and layer), which `gemm` would repack at
    /// every call. Shared by [`argmax_tree`] and the training pass (`gumbel_tree`).
    pub(crate) struct Halves {
        pub(crate) left: PackedRhs,
        pub(crate) right: PackedRhs,
    }

    impl Halves {
        /// `W_l` and `W_r` of `weight` (`(slice, row stride, column stride)` of `[2D, 5D]`).
        pub(crate) fn new((weight, rs, cs): (&[f32], usize, usize), d: usize) -> Self {
            Self {
                left: PackedRhs::new(weight, d, 5 * d, (rs, cs)),
                right: PackedRhs::new(&weight[d * rs..], d, 5 * d, (rs, cs)),
            }
        }

        /// `W_lᵀ` and `W_rᵀ` (`[5D, D]` each) of the same `weight`.
        pub(crate) fn transposed((weight, rs, cs): (&[f32], usize, usize), d: usize) -> Self {
            Self {
                left: PackedRhs::new(weight, 5 * d, d, (cs, rs)),
                right: PackedRhs::new(&weight[d * rs..], 5 * d, d, (cs, rs)),
            }
        }

        /// The projections of `m` rows `h` (`[m, D]`, row-major): `left = h·W_l (+ bias)` and
        /// `right = h·W_r` (`[m, 5D]` each, every element written).
        pub(crate) fn project(
            &self,
            h: &[f32],
            m: usize,
            d: usize,
            bias: Option<&[f32]>,
            (left, right): (&mut [f32], &mut [f32]),
        ) {
            let w = 5 * d;
            if let Some(bias) = bias {
                for row in left[..m * w].chunks_exact_mut(w) {
                    row.copy_from_slice(&bias[..w]);
                }
            }
            let mut left = move || self.left.product(m, left, w, bias.is_some(), h, (d, 1));
            let mut right = move || self.right.product(m, right, w, false, h, (d, 1));
            // A layer's few merged rows make two products too small to split on their own
            // (`PackedRhs::product`): with more than one thread they run side by side.
            if crate::par::parallel() {
                rayon::join(left, right);
            } else {
                left();
                right();
            }
        }
    }

    /// `out = softmax(s)` with the largest score subtracted first; a sum under `1e-12` is
    /// clamped to it (as `masked_softmax`).
    pub(crate) fn softmax(s: &[f32], out: &mut [f32]) {
        let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut z = 0f32;
        for (o, &v) in out.iter_mut().zip(s) {
            *o = (v - max).exp();
            z += *o;
        }
        let z = z.max(1e-12);
        for o in out.iter_mut() {
            *o /= z;
        }
    }

    /// The candidate parent of every pair in `todo` (node rows `(left, right)`), written with
    /// its score at the left node's place in `cand_h`, `cand_c`, `score`: each pair's gates
    /// are its left node's projection (`h·W_l + b`, from the nodes' `h` and `halves`) plus its
    /// right node's (`right`, `[nodes, 5D]`), then the fused cell update, for ranges of pairs
    /// on rayon's pool. The nodes merged since the last call (`merged`, in a pair of `todo`)
    /// get their right projections first, beside the first block's left ones.
    #[allow(clippy::too_many_arguments)]
    fn compose(
        x: &Inputs<'_>,
        layout: &GateLayout,
        (todo, merged): (&[(usize, usize)], &[usize]),
        (halves, right): (&Halves, &mut [f32]),
        (h, c): (&[f32], &[f32]),
        cand_h: &mut [f32],
        cand_c: &mut [f32],
        score: &mut [f32],
        s: &mut Scratch,
    ) {
        let d = x.d;
        let w = 5 * d;
        let node = |i: usize| i * d..(i + 1) * d;
        let scale = (d as f32).sqrt();
        // Blocks of pairs, so the scratch stays small on the first layer (which has every pair
        // of the batch) and the pass's peak memory is not raised by it; a later layer's new
        // pairs (two a sentence) are one block.
        const BLOCK: usize = 256;
        for (block, todo) in todo.chunks(BLOCK).enumerate() {
            let rows = todo.len();
            // The block's left projections as one product (split across the pool as `gemm`
            // would): in the cell tasks below, whose ranges are a few pairs each, every task
            // would stream all of `W_l` for its few rows.
            s.h.clear();
            for &(l, _) in todo {
                s.h.extend_from_slice(&h[node(l)]);
            }
            s.left.resize(rows * w, 0.0);
            let start = x.bias.map_or(Start::Zero, |b| Start::Row(&b[..w]));
            let split = par::parallel();
            let (out, lhs) = (&mut s.left[..], &s.h[..]);
            let mut project_left = move || {
                halves
                    .left
                    .product_from(split, rows, out, w, start, lhs, (d, 1))
            };
            let merged = if block == 0 { merged } else { &[] };
            if merged.is_empty() {
                project_left();
            } else {
                let m = merged.len();
                s.merged_h.clear();
                for &p in merged {
                    s.merged_h.extend_from_slice(&h[node(p)]);
                }
                s.right.resize(m * w, 0.0);
                let (out, lhs) = (&mut s.right[..], &s.merged_h[..]);
                let mut project_right = move || {
                    halves
                        .right
                        .product_on(split, m, out, w, false, lhs, (d, 1))
                };
                // A layer's products are a few rows each, too small for `PackedRhs` to split
                // on their own: with more than one thread they run side by side.
                if split {
                    rayon::join(project_left, project_right);
                } else {
                    project_left();
                    project_right();
                }
                for (row, &p) in merged.iter().enumerate() {
                    right[p * w..(p + 1) * w].copy_from_slice(&s.right[row * w..][..w]);
                }
            }
            let (left, right) = (&s.left, &*right);
            s.c.resize(rows * d, 0.0);
            s.cand.resize(rows * d, 0.0);
            par::rows(
                rows,
                pair_cost(d),
                vec![(&mut s.c[..rows * d], d), (&mut s.cand[..rows * d], d)],
                &|r, o| {
                    let [co, ho] = o else {
                        unreachable!("two outputs")
                    };
                    // The gates of at most `CHUNK` pairs at a time.
                    const CHUNK: usize = 64;
                    let mut gates = Vec::with_capacity(CHUNK.min(r.len()) * w);
                    let (mut cl, mut cr) = (
                        Vec::with_capacity(CHUNK.min(r.len()) * d),
                        Vec::with_capacity(CHUNK.min(r.len()) * d),
                    );
                    let first = r.start;
                    for (k, pairs) in todo[r].chunks(CHUNK).enumerate() {
                        gates.clear();
                        cl.clear();
                        cr.clear();
                        for (i, &(l, rr)) in pairs.iter().enumerate() {
                            let row = first + k * CHUNK + i;
                            let (pl, pr) =
                                (&left[row * w..(row + 1) * w], &right[rr * w..(rr + 1) * w]);
                            gates.extend(pl.iter().zip(pr).map(|(a, b)| a + b));
                            cl.extend_from_slice(&c[node(l)]);
                            cr.extend_from_slice(&c[node(rr)]);
                        }
                        let out = k * CHUNK * d..(k * CHUNK + pairs.len()) * d;
                        let co = &mut co[out.clone()];
                        gated_cell(&gates, &[&cl[..], &cr[..]], layout, d, co);
                        gated_output(&gates, co, layout, d, &mut ho[out]);
                    }
                },
            );
            for (row, &(l, _)) in todo.iter().enumerate() {
                let hr = &s.cand[row * d..(row + 1) * d];
                cand_h[node(l)].copy_from_slice(hr);
                cand_c[node(l)].copy_from_slice(&s.c[row * d..(row + 1) * d]);
                let dot: f32 = hr.iter().zip(x.query).map(|(a, b)| a * b).sum();
                score[l] = dot / scale;
            }
        }
    }
}

/// The CPU backends' entry point.
pub(crate) mod host {
    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::{cpu, ArgmaxTreeParts};
    use crate::host::{dims3, rows_of, HostTensor};
    use crate::GateLayout;

    /// The CPU op on `f32` tensors whose weight's strides are exposed; `None` otherwise.
    pub(crate) fn argmax_tree<B: Backend>(
        leaf_h: FloatTensor<B>,
        leaf_c: FloatTensor<B>,
        weight: FloatTensor<B>,
        bias: Option<FloatTensor<B>>,
        query: FloatTensor<B>,
        lengths: &[usize],
        layout: &GateLayout,
    ) -> Option<ArgmaxTreeParts<B>>
    where
        FloatTensor<B>: HostTensor,
    {
        let (batch, n, d) = dims3(&leaf_h);
        // The leaves' rows where they are (the `h` and `c` halves of one tensor are strided
        // views, which `host` would copy whole).
        let (mut h_copy, mut c_copy) = (None, None);
        let lh = rows_of(&leaf_h, &mut h_copy)?;
        let lc = rows_of(&leaf_c, &mut c_copy)?;
        let q = query.host()?;
        let bias = match &bias {
            Some(b) => Some(b.host()?),
            None => None,
        };
        // The weight's own memory where the backend exposes its strides, else a row-major copy.
        let copy;
        let weight = match weight.matrix() {
            Some((ws, wo, rs, cs)) => (&ws[wo..], rs as usize, cs as usize),
            None => {
                copy = weight.host()?;
                (&copy[..], 5 * d, 1)
            }
        };
        let inputs = cpu::Inputs {
            leaf_h: lh,
            leaf_c: lc,
            weight,
            bias: bias.as_deref(),
            query: &q,
            lengths,
            n,
            d,
        };
        let out = cpu::argmax_tree(&inputs, layout);
        let layers = n.saturating_sub(1);
        let t = <FloatTensor<B> as HostTensor>::from_f32;
        Some(ArgmaxTreeParts {
            root_h: t(out.root_h, Shape::new([batch, d])),
            root_c: t(out.root_c, Shape::new([batch, d])),
            chosen: t(out.chosen, Shape::new([batch, layers, d])),
            selected: out.selected,
            probabilities: t(out.probabilities, Shape::new([batch, layers, layers])),
        })
    }
}
