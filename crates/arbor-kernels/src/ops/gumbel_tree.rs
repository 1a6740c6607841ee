//! `st_gumbel_tree`: a whole training pass of the Gumbel Tree-LSTM's bottom-up layers
//! (straight-through Gumbel-softmax decisions) as one op on the CPU backends, whose backward
//! pass needs `O(n)` matrix products per sentence instead of `O(n²)` (docs/kernels.md, "The
//! Gumbel Tree-LSTM's training pass as one op").

use std::sync::Arc;

use burn::prelude::*;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{TensorData, TensorPrimitive};

use crate::{ArborBackend, GateLayout, TreePass};

/// What a backend's [`ArborBackend::st_gumbel_tree`] returns.
#[derive(Debug)]
pub struct StGumbelTreeParts<B: Backend> {
    /// `[batch, n + 1, D]`: row 0 the root `h`, row 1 the root `c`, row `2 + t` the parent
    /// selected at layer `t` (one tensor, because a Burn graph node has one output).
    pub out: FloatTensor<B>,
    /// [`TreePass::selected`], row-major.
    pub selected: Vec<i64>,
    /// [`TreePass::probabilities`] (the Gumbel-softmax `y`).
    pub probabilities: FloatTensor<B>,
    /// What the backward pass reads.
    pub saved: StGumbelTreeSaved,
}

/// What [`st_gumbel_tree`]'s backward pass reads: every unique node's and candidate's values
/// and projections and every layer's selection, as host `f32` data (`O(n·D)` per sentence).
#[derive(Clone)]
pub struct StGumbelTreeSaved(Arc<cpu::Saved>);

impl std::fmt::Debug for StGumbelTreeSaved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StGumbelTreeSaved")
            .field("batch", &self.0.lengths.len())
            .field("n", &self.0.n)
            .field("d", &self.0.d)
            .field("objects", &(self.0.c.len() / self.0.d.max(1)))
            .finish()
    }
}

/// The Gumbel Tree-LSTM's bottom-up layers with straight-through Gumbel-softmax decisions
/// (Choi, Yoo & Lee 2018, in training) as one op, or `None` where the backend has no such op
/// (the caller then runs the layers as tensor ops): the CPU backends on `f32` data and autodiff
/// over them have it; CUDA and other float types do not.
///
/// Layer `t` composes every adjacent pair of the current nodes with the binary Tree-LSTM
/// (`layout`, as [`crate::argmax_tree`]), scores each `q·h / √D`, and selects with
/// `y = softmax((score + noise) / τ)` over the valid pairs: forward, the first pair of highest
/// `score + noise` is merged (the one-hot value of the straight-through selection); backward,
/// the gradient reaches `y` exactly as through eq. 7's mix `s·h̃ + (1 − cum)·h_l + (cum −
/// s)·h_r` with `s = onehot − y.detach() + y`, and through the chosen parent `Σ_k s_k·h'_k`
/// (intra-attention). The gradients of the leaves, `weight`, `bias` and `query` equal those of
/// the layers written as tensor ops, to rounding, with `O(n)` matrix products per sentence:
/// candidates are composed once and carried, a node's gradient stays in gate space until it is
/// needed as a `D`-vector, and the weight's gradient is one product over the unique pairs.
///
/// # Shapes
/// - `leaf_h`, `leaf_c`: `[batch, n, D]`; positions past an example's length are not read
/// - `weight`: `[2D, 5D]` (Burn's `[in, out]`), `bias`: `[5D]`, `query`: `[D]`
/// - `noise`: `[batch, n − 1, n − 1]`: layer `t`'s Gumbel noise in row `t`, columns
///   `0..n − 1 − t` (entries on invalid pairs are not read)
/// - `lengths`: `batch` entries in `1..=n`; `tau > 0`
/// - output: see [`TreePass`] (`probabilities`: each layer's `y`, a constant)
///
/// # Panics
/// If the shapes disagree, `layout` is not five blocks with two forget gates, `tau` is not
/// positive, or a length is outside `1..=n`.
#[allow(clippy::too_many_arguments)]
pub fn st_gumbel_tree<B: ArborBackend>(
    leaf_h: Tensor<B, 3>,
    leaf_c: Tensor<B, 3>,
    weight: Tensor<B, 2>,
    bias: Option<Tensor<B, 1>>,
    query: Tensor<B, 1>,
    noise: Tensor<B, 3>,
    tau: f64,
    lengths: &[usize],
    layout: &GateLayout,
) -> Option<TreePass<B>> {
    let [batch, n, d] = leaf_h.dims();
    assert_eq!(
        leaf_c.dims(),
        [batch, n, d],
        "st_gumbel_tree: leaf_c's shape"
    );
    assert_eq!(
        weight.dims(),
        [2 * d, 5 * d],
        "st_gumbel_tree: weight's shape"
    );
    if let Some(b) = &bias {
        assert_eq!(b.dims(), [5 * d], "st_gumbel_tree: bias's shape");
    }
    assert_eq!(query.dims(), [d], "st_gumbel_tree: query's shape");
    let layers = n.saturating_sub(1);
    assert_eq!(
        noise.dims(),
        [batch, layers, layers],
        "st_gumbel_tree: noise's shape"
    );
    assert!(tau > 0.0, "st_gumbel_tree: tau must be positive, got {tau}");
    assert_eq!(
        lengths.len(),
        batch,
        "st_gumbel_tree: one length per example"
    );
    assert!(
        lengths.iter().all(|&l| (1..=n).contains(&l)),
        "st_gumbel_tree: every length must be in 1..={n}: {lengths:?}"
    );
    assert!(
        layout.blocks == 5 && layout.forgets.len() == 2 && layout.is_valid(),
        "st_gumbel_tree: the layout must be five blocks with two forget gates"
    );
    let device = leaf_h.device();
    let parts = B::st_gumbel_tree(
        leaf_h.into_primitive().tensor(),
        leaf_c.into_primitive().tensor(),
        weight.into_primitive().tensor(),
        bias.map(|b| b.into_primitive().tensor()),
        query.into_primitive().tensor(),
        noise.into_primitive().tensor(),
        tau,
        lengths,
        layout,
    )?;
    let out = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(parts.out));
    Some(TreePass {
        root_h: out.clone().narrow(1, 0, 1).reshape([batch, d]),
        root_c: out.clone().narrow(1, 1, 1).reshape([batch, d]),
        chosen: out.narrow(1, 2, layers),
        selected: Tensor::from_data(TensorData::new(parts.selected, [batch, layers]), &device),
        probabilities: Tensor::from_primitive(TensorPrimitive::Float(parts.probabilities)),
    })
}

/// The gradients of [`st_gumbel_tree`]'s `out` (`[batch, n + 1, D]`, see
/// [`StGumbelTreeParts::out`]) with respect to `leaf_h`, `leaf_c`, `weight`, `bias` (zeros
/// when the pass had none) and `query`, on `grad`'s device. The work is host code over the
/// saved values, so it needs nothing of the backend but reading `grad` and making tensors.
pub(crate) fn st_gumbel_tree_backward<B: Backend>(
    saved: &StGumbelTreeSaved,
    grad: FloatTensor<B>,
) -> [FloatTensor<B>; 5] {
    let device = B::float_device(&grad);
    let grad = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(grad)).into_data();
    let s = &saved.0;
    let (batch, n, d) = (s.lengths.len(), s.n, s.d);
    // The forward pass ran on `f32` data, so its gradient is `f32` too; convert otherwise.
    let grad: Vec<f32> = grad
        .convert::<f32>()
        .into_vec::<f32>()
        .expect("data converted to f32 reads as f32");
    let g = cpu::backward(s, &grad);
    let rank3 = |v: Vec<f32>| {
        Tensor::<B, 3>::from_data(TensorData::new(v, [batch, n, d]), &device)
            .into_primitive()
            .tensor()
    };
    [
        rank3(g.leaf_h),
        rank3(g.leaf_c),
        Tensor::<B, 2>::from_data(TensorData::new(g.weight, [2 * d, 5 * d]), &device)
            .into_primitive()
            .tensor(),
        Tensor::<B, 1>::from_data(TensorData::new(g.bias, [5 * d]), &device)
            .into_primitive()
            .tensor(),
        Tensor::<B, 1>::from_data(TensorData::new(g.query, [d]), &device)
            .into_primitive()
            .tensor(),
    ]
}

/// The loops over host `f32` data.
// Rows of several equal-length buffers are indexed together; indices keep them readable.
#[allow(clippy::needless_range_loop)]
pub(crate) mod cpu {
    use crate::host::Rows;
    use crate::lanes::dot8;
    use crate::ops::argmax_tree::cpu::{pair_cost, softmax, Halves};
    use crate::ops::gated_cell::cpu::{
        gated_cell, gated_cell_backward, gated_output, gated_output_backward,
    };
    use crate::ops::linear::host::gemm_slices;
    use crate::par;
    use crate::GateLayout;

    /// A candidate whose object id is not assigned yet (composed at the next layer's start).
    const PENDING: u32 = u32::MAX;

    /// The inputs of [`forward`]: the leaves `[batch, n, D]`, the composition's weight as
    /// `(slice, row stride, column stride)` of its `[2D, 5D]` matrix, the bias `[5D]`, the
    /// query `[D]` and the noise `[batch, n − 1, n − 1]`.
    pub(crate) struct Inputs<'a> {
        pub(crate) leaf_h: Rows<'a>,
        pub(crate) leaf_c: Rows<'a>,
        pub(crate) weight: (&'a [f32], usize, usize),
        pub(crate) bias: Option<&'a [f32]>,
        pub(crate) query: &'a [f32],
        pub(crate) noise: &'a [f32],
        pub(crate) tau: f32,
        pub(crate) lengths: &'a [usize],
        pub(crate) n: usize,
        pub(crate) d: usize,
    }

    /// One incomplete sentence at one layer: where its `k + 1` nodes and `k` candidates
    /// (object ids, in order) and the Gumbel-softmax `y` over the candidates are in
    /// [`Saved`]'s `record_nodes`, `record_cands` and `record_y`, and the selected position.
    /// Offsets into three buffers reserved once, rather than three vectors of its own: no
    /// allocation per sentence and layer (small blocks that lived from the forward to the
    /// backward among the larger ones the pass frees).
    pub(crate) struct Layer {
        b: usize,
        nodes: usize,
        cands: usize,
        k: usize,
        best: usize,
    }

    /// The forward pass's values. Objects are the leaves (ids `0..leaves`, sentence `b`'s at
    /// `start[b]..start[b] + len`) and then every candidate parent ever composed, in order.
    pub(crate) struct Saved {
        pub(crate) n: usize,
        pub(crate) d: usize,
        pub(crate) lengths: Vec<usize>,
        start: Vec<usize>,
        leaves: usize,
        layout: GateLayout,
        tau: f32,
        /// `[2D, 5D]`, row-major.
        weight: Vec<f32>,
        query: Vec<f32>,
        /// Every object's `h` and `c` `[objects, D]`.
        h: Vec<f32>,
        pub(crate) c: Vec<f32>,
        /// Every object's projections `h·W_l`, `h·W_r` (no bias) `[objects, 5D]`.
        proj_l: Vec<f32>,
        proj_r: Vec<f32>,
        /// The composition's bias `[5D]`, if it has one.
        bias: Option<Vec<f32>>,
        /// Every candidate's children (object ids); its gate pre-activations are theirs
        /// projected plus the bias ([`candidate_gates`]).
        children: Vec<(u32, u32)>,
        /// Per layer, its incomplete sentences.
        layers: Vec<Vec<Layer>>,
        /// Every [`Layer`]'s nodes, candidates and `y`, one after the other.
        record_nodes: Vec<u32>,
        record_cands: Vec<u32>,
        record_y: Vec<f32>,
        /// Every sentence's root object.
        roots: Vec<u32>,
    }

    impl Saved {
        fn nodes(&self, rec: &Layer) -> &[u32] {
            &self.record_nodes[rec.nodes..rec.nodes + rec.k + 1]
        }

        fn cands(&self, rec: &Layer) -> &[u32] {
            &self.record_cands[rec.cands..rec.cands + rec.k]
        }

        fn y(&self, rec: &Layer) -> &[f32] {
            &self.record_y[rec.cands..rec.cands + rec.k]
        }

        /// The object selected at `rec`'s layer.
        fn selected(&self, rec: &Layer) -> u32 {
            self.record_cands[rec.cands + rec.best]
        }
    }

    /// [`forward`]'s outputs, row-major: `[batch, n + 1, D]` (root `h`, root `c`, the chosen
    /// parents), selections `[batch, n − 1]`, `y` `[batch, n − 1, n − 1]`.
    pub(crate) struct Outputs {
        pub(crate) out: Vec<f32>,
        pub(crate) selected: Vec<i64>,
        pub(crate) probabilities: Vec<f32>,
    }

    /// The gradients [`backward`] returns, row-major.
    pub(crate) struct Grads {
        pub(crate) leaf_h: Vec<f32>,
        pub(crate) leaf_c: Vec<f32>,
        pub(crate) weight: Vec<f32>,
        pub(crate) bias: Vec<f32>,
        pub(crate) query: Vec<f32>,
    }

    /// `left = h·W_l`, `right = h·W_r` of `m` rows `h` `[m, D]` (`halves` packed from the
    /// `[2D, 5D]` weight), appended to `left` and `right`.
    fn project(
        halves: &Halves,
        h: &[f32],
        m: usize,
        d: usize,
        left: &mut Vec<f32>,
        right: &mut Vec<f32>,
    ) {
        let w = 5 * d;
        let at = left.len();
        left.resize(at + m * w, 0.0);
        right.resize(at + m * w, 0.0);
        halves.project(h, m, d, None, (&mut left[at..], &mut right[at..]));
    }

    #[inline(always)]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        dot8(a, b)
    }

    #[inline(always)]
    fn add(dst: &mut [f32], src: &[f32]) {
        for (a, b) in dst.iter_mut().zip(src) {
            *a += b;
        }
    }

    /// `dst += a·src`.
    #[inline(always)]
    fn axpy(dst: &mut [f32], a: f32, src: &[f32]) {
        for (x, y) in dst.iter_mut().zip(src) {
            *x += a * y;
        }
    }

    /// Candidate `ci`'s gate pre-activations `[5D]` into `gates`: its children's saved
    /// projections and the bias, summed as [`compose`] summed them (so the same values, bit for
    /// bit). Recomputed where the backward needs them rather than saved: a `[candidates, 5D]`
    /// block less to keep, for two additions per value.
    fn candidate_gates(s: &Saved, ci: usize, gates: &mut [f32]) {
        let w = 5 * s.d;
        let (l, r) = s.children[ci];
        let (l, r) = (l as usize, r as usize);
        let (pl, pr) = (&s.proj_l[l * w..(l + 1) * w], &s.proj_r[r * w..(r + 1) * w]);
        for ((g, &a), &b) in gates.iter_mut().zip(pl).zip(pr) {
            *g = a + b;
        }
        if let Some(bias) = &s.bias {
            add(gates, bias);
        }
    }

    /// Candidate `ci`'s cell backward for upstream gradients `dh` (of its `h`) and `dc` (of its
    /// `c`): its gate gradient `d_gates` `[5D]` and its children's `c` gradients `dcl`, `dcr`
    /// (`dc_tot` `[D]` and `gates` `[5D]`: scratch for the cell's whole `c` gradient and its
    /// gate pre-activations, every element written).
    #[allow(clippy::too_many_arguments)]
    fn cell_backward(
        s: &Saved,
        ci: usize,
        dh: &[f32],
        dc: &[f32],
        d_gates: &mut [f32],
        (dcl, dcr): (&mut [f32], &mut [f32]),
        dc_tot: &mut [f32],
        gates: &mut [f32],
    ) {
        let d = s.d;
        let u = s.leaves + ci;
        candidate_gates(s, ci, gates);
        let gates = &*gates;
        d_gates.fill(0.0);
        gated_output_backward(
            gates,
            &s.c[u * d..(u + 1) * d],
            dh,
            &s.layout,
            d,
            d_gates,
            dc_tot,
        );
        add(dc_tot, dc);
        let (l, r) = s.children[ci];
        let (l, r) = (l as usize, r as usize);
        gated_cell_backward(
            gates,
            &[&s.c[l * d..(l + 1) * d], &s.c[r * d..(r + 1) * d]],
            dc_tot,
            &s.layout,
            d,
            d_gates,
            &mut [dcl, dcr],
        );
    }

    /// See [`super::st_gumbel_tree`]. Nodes and candidates are objects that never move: a
    /// layer's record lists the ids of its nodes and candidates in order, and only the two
    /// pairs around each merge are composed (with their projections) at the next layer.
    pub(crate) fn forward(x: &Inputs<'_>, layout: &GateLayout) -> (Outputs, Saved) {
        let (n, d) = (x.n, x.d);
        let w = 5 * d;
        let batch = x.lengths.len();
        let layers = n.saturating_sub(1);
        let (ws, w_rs, w_cs) = x.weight;
        let mut weight = vec![0f32; 2 * d * w];
        for r in 0..2 * d {
            for col in 0..w {
                weight[r * w + col] = ws[r * w_rs + col * w_cs];
            }
        }
        let mut start = Vec::with_capacity(batch);
        let mut total = 0;
        for &len in x.lengths {
            start.push(total);
            total += len;
        }
        // Every object the pass creates, known before it starts: a sentence of `len` leaves
        // composes its `len − 1` pairs at the first layer and at most two new ones at each of
        // the `len − 2` after it. Reserving them up front keeps the saved buffers from
        // doubling as they grow (a transient copy, and up to twice the memory they need).
        let candidates: usize = x
            .lengths
            .iter()
            .map(|&len| len.saturating_sub(1) + 2 * len.saturating_sub(2))
            .sum();
        let objects = total + candidates;
        // The layers' records: a sentence of `len` is incomplete at `len − 1` layers, with
        // `len − 1 − t` candidates at layer `t`.
        let record_count: usize = x.lengths.iter().map(|&len| len.saturating_sub(1)).sum();
        let record_cands: usize = x
            .lengths
            .iter()
            .map(|&len| len * len.saturating_sub(1) / 2)
            .sum();
        let mut h = Vec::with_capacity(objects * d);
        let mut c = Vec::with_capacity(objects * d);
        for (b, &len) in x.lengths.iter().enumerate() {
            x.leaf_h.extend(b * n, len, &mut h);
            x.leaf_c.extend(b * n, len, &mut c);
        }
        let halves = Halves::new((&weight, w, 1), d);
        let (mut proj_l, mut proj_r) = (
            Vec::with_capacity(objects * w),
            Vec::with_capacity(objects * w),
        );
        project(&halves, &h, total, d, &mut proj_l, &mut proj_r);
        let mut s = Saved {
            n,
            d,
            lengths: x.lengths.to_vec(),
            start: start.clone(),
            leaves: total,
            layout: layout.clone(),
            tau: x.tau,
            weight,
            query: x.query.to_vec(),
            h,
            c,
            proj_l,
            proj_r,
            bias: x.bias.map(<[f32]>::to_vec),
            children: Vec::with_capacity(candidates),
            layers: Vec::with_capacity(layers),
            record_nodes: Vec::with_capacity(record_count + record_cands),
            record_cands: Vec::with_capacity(record_cands),
            record_y: Vec::with_capacity(record_cands),
            roots: Vec::with_capacity(batch),
        };
        let mut out = Outputs {
            out: vec![0f32; batch * (n + 1) * d],
            selected: vec![0i64; batch * layers],
            probabilities: vec![0f32; batch * layers * layers],
        };
        let mut nodes: Vec<Vec<u32>> = start
            .iter()
            .zip(x.lengths)
            .map(|(&s0, &len)| (s0 as u32..(s0 + len) as u32).collect())
            .collect();
        let mut cands: Vec<Vec<u32>> = x
            .lengths
            .iter()
            .map(|&len| vec![PENDING; len.saturating_sub(1)])
            .collect();
        // The pairs to compose: (sentence, candidate position, left, right).
        let mut todo: Vec<(usize, usize, u32, u32)> = nodes
            .iter()
            .enumerate()
            .flat_map(|(b, ns)| {
                ns.windows(2)
                    .enumerate()
                    .map(move |(k, p)| (b, k, p[0], p[1]))
            })
            .collect();
        let mut score: Vec<f32> = Vec::new();
        let mut z = vec![0f32; layers];
        for t in 0..layers {
            let first = s.h.len() / d;
            compose(x, layout, &halves, &todo, &mut s, &mut score);
            for (i, &(b, k, _, _)) in todo.iter().enumerate() {
                cands[b][k] = (first + i) as u32;
            }
            todo.clear();
            let mut records = Vec::new();
            for (b, &len) in x.lengths.iter().enumerate() {
                if len < t + 2 {
                    continue;
                }
                let k = len - t - 1;
                let row = (b * layers + t) * layers;
                let mut best = 0;
                for j in 0..k {
                    let u = cands[b][j] as usize - s.leaves;
                    z[j] = (score[u] + x.noise[row + j]) / x.tau;
                    // The first of the highest, as an argmax; a NaN is never higher.
                    if z[j] > z[best] {
                        best = j;
                    }
                }
                let at = s.record_y.len();
                s.record_y.resize(at + k, 0f32);
                let y = &mut s.record_y[at..];
                softmax(&z[..k], y);
                out.probabilities[row..row + k].copy_from_slice(y);
                out.selected[b * layers + t] = best as i64;
                let parent = cands[b][best];
                let p = parent as usize;
                out.out[(b * (n + 1) + 2 + t) * d..][..d].copy_from_slice(&s.h[p * d..(p + 1) * d]);
                records.push(Layer {
                    b,
                    nodes: s.record_nodes.len(),
                    cands: s.record_cands.len(),
                    k,
                    best,
                });
                s.record_nodes.extend_from_slice(&nodes[b]);
                s.record_cands.extend_from_slice(&cands[b]);
                // Merge: the parent replaces its two children; the pairs on either side of it
                // are new.
                let ns = &mut nodes[b];
                ns[best] = parent;
                ns.remove(best + 1);
                let cs = &mut cands[b];
                cs.remove(best);
                if best > 0 {
                    cs[best - 1] = PENDING;
                    todo.push((b, best - 1, ns[best - 1], parent));
                }
                if best + 1 < ns.len() {
                    cs[best] = PENDING;
                    todo.push((b, best, parent, ns[best + 1]));
                }
            }
            s.layers.push(records);
        }
        for (b, ns) in nodes.iter().enumerate() {
            let r = ns[0] as usize;
            s.roots.push(ns[0]);
            let at = b * (n + 1) * d;
            out.out[at..at + d].copy_from_slice(&s.h[r * d..(r + 1) * d]);
            out.out[at + d..at + 2 * d].copy_from_slice(&s.c[r * d..(r + 1) * d]);
        }
        debug_assert!(
            s.h.len() <= objects * d,
            "the reserved objects hold every object"
        );
        debug_assert_eq!(
            s.record_cands.len(),
            record_cands,
            "every record's candidates"
        );
        (out, s)
    }

    /// Composes the pairs of `todo` as new objects (their gates, `c`, `h`, projections and
    /// scores appended to `s` and `score`), rows in parallel.
    fn compose(
        x: &Inputs<'_>,
        layout: &GateLayout,
        halves: &Halves,
        todo: &[(usize, usize, u32, u32)],
        s: &mut Saved,
        score: &mut Vec<f32>,
    ) {
        let m = todo.len();
        if m == 0 {
            return;
        }
        let d = x.d;
        let w = 5 * d;
        let objects = s.h.len() / d;
        let (mut g, mut cn, mut hn) = (vec![0f32; m * w], vec![0f32; m * d], vec![0f32; m * d]);
        {
            let (pl, pr, c) = (&s.proj_l, &s.proj_r, &s.c);
            par::rows(
                m,
                pair_cost(d),
                vec![(&mut g, w), (&mut cn, d), (&mut hn, d)],
                &|r, o| {
                    let [go, co, ho] = o else {
                        unreachable!("three outputs")
                    };
                    let rows = r.len();
                    let (mut cl, mut cr) =
                        (Vec::with_capacity(rows * d), Vec::with_capacity(rows * d));
                    for (i, &(_, _, l, rr)) in todo[r].iter().enumerate() {
                        let (l, rr) = (l as usize, rr as usize);
                        let gi = &mut go[i * w..(i + 1) * w];
                        for j in 0..w {
                            gi[j] = pl[l * w + j] + pr[rr * w + j];
                        }
                        if let Some(bias) = x.bias {
                            add(gi, bias);
                        }
                        cl.extend_from_slice(&c[l * d..(l + 1) * d]);
                        cr.extend_from_slice(&c[rr * d..(rr + 1) * d]);
                    }
                    gated_cell(go, &[&cl[..], &cr[..]], layout, d, co);
                    gated_output(go, co, layout, d, ho);
                },
            );
        }
        let scale = (d as f32).sqrt();
        for i in 0..m {
            score.push(dot(&hn[i * d..(i + 1) * d], x.query) / scale);
        }
        project(halves, &hn, m, d, &mut s.proj_l, &mut s.proj_r);
        s.children.extend(todo.iter().map(|&(_, _, l, r)| (l, r)));
        s.h.extend_from_slice(&hn);
        s.c.extend_from_slice(&cn);
        debug_assert_eq!(s.h.len() / d, objects + m);
    }

    /// One sentence's share of [`backward`]'s running sums, so that the sentences of a layer
    /// can be walked in parallel, each owning its state. The gradients are kept for the
    /// sentence's nodes only, by node number (its `len` leaves, then the parent selected at
    /// layer `t` as `len + t`): a candidate that is never selected is nobody's child and never
    /// a node, so its `dh`, `dc`, `P` and `Q` stay zero and need no row (at n = 8, 15 rows a
    /// sentence instead of about 24). Slices of one buffer per kind for the whole batch: five
    /// allocations for the backward, not five a sentence.
    struct SentenceGrads<'a> {
        /// `[nodes, D]`.
        dh: &'a mut [f32],
        dc: &'a mut [f32],
        /// `[nodes, 5D]`.
        pp: &'a mut [f32],
        qq: &'a mut [f32],
        /// Per candidate (local number minus the sentence's length), the sum of its score
        /// gradients over the layers.
        dlogit_sum: &'a mut [f32],
    }

    /// The gradients of [`forward`]'s `out` (`grad`, `[batch, n + 1, D]`), walking the layers
    /// down. Every object keeps its gradient as `dh` (a `D`-vector: the root, the chosen
    /// parents, a selected parent's upstream), `P` and `Q` (gate-space sums of the pairs it is
    /// the left and the right child of, so its full `h` gradient is `dh + P·W_lᵀ + Q·W_rᵀ`)
    /// and `dc`. At layer `t`, with `g_j` the gradient of the next layer's node `j` (its
    /// object's sums so far, which hold every layer above), `x` the layer's nodes and `p` its
    /// candidates: `∂L/∂s_i = ⟨g_i, p_i − x_i⟩ + Σ_{j>i} ⟨g_j, x_{j+1} − x_j⟩ + ⟨∂L/∂chosen,
    /// h'_i⟩` (eq. 7 and the chosen parent), where `⟨g, v⟩ = ⟨dh, h_v⟩ + ⟨P, h_v·W_l⟩ + ⟨Q,
    /// h_v·W_r⟩ + ⟨dc, c_v⟩` reads the saved projections; then the softmax's backward gives
    /// each candidate's score gradient, the selected parent's full gradient is formed (one row
    /// per sentence, one product per layer), and every candidate's cell backward adds its gate
    /// gradient to its children's `P`, `Q`, its `dc` share to theirs, and to its own running
    /// sum for `dW`. A layer's sentences touch only their own objects: they run in parallel.
    pub(crate) fn backward(s: &Saved, grad: &[f32]) -> Grads {
        let (n, d) = (s.n, s.d);
        let w = 5 * d;
        let batch = s.lengths.len();
        let objects = s.h.len() / d;
        let leaves = s.leaves;
        let cands = objects - leaves;
        let scale = (d as f32).sqrt();
        // Every object's sentence-local number (its leaves, then its candidates in creation
        // order); a candidate belongs to its left child's sentence, and its children were made
        // before it. And every node's number in its sentence's state ([`SentenceGrads`]).
        let mut local = vec![0u32; objects];
        let mut owner = vec![0u32; objects];
        let mut node = vec![u32::MAX; objects];
        let mut count: Vec<u32> = s.lengths.iter().map(|&len| len as u32).collect();
        for (b, (&s0, &len)) in s.start.iter().zip(&s.lengths).enumerate() {
            for i in 0..len {
                local[s0 + i] = i as u32;
                node[s0 + i] = i as u32;
                owner[s0 + i] = b as u32;
            }
        }
        for (ci, &(l, _)) in s.children.iter().enumerate() {
            let b = owner[l as usize];
            owner[leaves + ci] = b;
            local[leaves + ci] = count[b as usize];
            count[b as usize] += 1;
        }
        for (t, records) in s.layers.iter().enumerate() {
            for rec in records {
                node[s.selected(rec) as usize] = (s.lengths[rec.b] + t) as u32;
            }
        }
        let lo = |u: u32| local[u as usize] as usize;
        let no = |u: u32| node[u as usize] as usize;
        // A sentence of `len` leaves has `2·len − 1` nodes (none when empty).
        let nodes = |len: usize| (2 * len).saturating_sub(1);
        let all: usize = s.lengths.iter().map(|&len| nodes(len)).sum();
        let (mut dh_all, mut dc_all) = (vec![0f32; all * d], vec![0f32; all * d]);
        let (mut pp_all, mut qq_all) = (vec![0f32; all * w], vec![0f32; all * w]);
        let mut dlogit_all = vec![0f32; cands];
        let mut states: Vec<SentenceGrads> = Vec::with_capacity(batch);
        {
            let (mut dh, mut dc) = (&mut dh_all[..], &mut dc_all[..]);
            let (mut pp, mut qq) = (&mut pp_all[..], &mut qq_all[..]);
            let mut dl = &mut dlogit_all[..];
            // The first `len` values of `v`, which keeps the rest.
            fn cut<'a>(v: &mut &'a mut [f32], len: usize) -> &'a mut [f32] {
                let (head, tail) = std::mem::take(v).split_at_mut(len);
                *v = tail;
                head
            }
            for (&m, &len) in count.iter().zip(&s.lengths) {
                let k = nodes(len);
                states.push(SentenceGrads {
                    dh: cut(&mut dh, k * d),
                    dc: cut(&mut dc, k * d),
                    pp: cut(&mut pp, k * w),
                    qq: cut(&mut qq, k * w),
                    dlogit_sum: cut(&mut dl, m as usize - len),
                });
            }
        }
        // The selected parents' own gate gradients, one row per merge, and each candidate's
        // row there (a candidate is selected at most once). After the layers they join the
        // score shares in `gq`'s memory as every candidate's summed gate gradient: no
        // `[candidates, 5D]` block beside `gq`.
        let mut chosen: Vec<f32> = Vec::with_capacity(s.roots.len() * s.n.saturating_sub(1) * w);
        let mut chosen_at = vec![u32::MAX; cands];
        // Every candidate's cell backward for an upstream `h` gradient of `q / √D` (and none
        // for `c`): its gate gradient `gq` and its children's `c` gradients `cq` (left, right).
        // A layer's score gradient `dlogit` then reaches the candidate's children as `dlogit`
        // times these, with no activation recomputed per layer.
        let mut gq = vec![0f32; cands * w];
        let mut cq = vec![0f32; cands * 2 * d];
        {
            let q: Vec<f32> = s.query.iter().map(|&v| v / scale).collect();
            let zero = vec![0f32; d];
            par::rows(
                cands,
                8 * w,
                vec![(&mut gq, w), (&mut cq, 2 * d)],
                &|r, o| {
                    let [go, co] = o else {
                        unreachable!("two outputs")
                    };
                    let (mut dc_tot, mut gates) = (vec![0f32; d], vec![0f32; w]);
                    for (i, ci) in r.enumerate() {
                        let (dl, dr) = co[i * 2 * d..(i + 1) * 2 * d].split_at_mut(d);
                        cell_backward(
                            s,
                            ci,
                            &q,
                            &zero,
                            &mut go[i * w..(i + 1) * w],
                            (dl, dr),
                            &mut dc_tot,
                            &mut gates,
                        );
                    }
                },
            );
        }
        let gr = |b: usize, row: usize| &grad[(b * (n + 1) + row) * d..][..d];
        for (b, &root) in s.roots.iter().enumerate() {
            let r = no(root);
            let st = &mut states[b];
            add(&mut st.dh[r * d..(r + 1) * d], gr(b, 0));
            add(&mut st.dc[r * d..(r + 1) * d], gr(b, 1));
        }
        // `W_lᵀ` and `W_rᵀ`, packed once for the layers' products and the leaves'.
        let wt = Halves::transposed((&s.weight, w, 1), d);
        let mut full = Vec::new();
        let mut gathered = Vec::new();
        let mut best_gates = Vec::new();
        let shared = Shared {
            s,
            gq: &gq,
            cq: &cq,
            local: &local,
            node: &node,
        };
        for t in (0..s.layers.len()).rev() {
            let records = &s.layers[t];
            // The chosen parent's gradient is the selected node's, at the next layer; the
            // selected parents' full `h` gradients, one row per sentence.
            let r = records.len();
            full.clear();
            for rec in records {
                let p = no(s.selected(rec));
                let dh = &mut states[rec.b].dh[p * d..(p + 1) * d];
                add(dh, gr(rec.b, 2 + t));
                full.extend_from_slice(dh);
            }
            for side in 0..2 {
                gathered.clear();
                for rec in records {
                    let p = no(s.selected(rec));
                    let st = &states[rec.b];
                    let sums = if side == 0 { &st.pp } else { &st.qq };
                    gathered.extend_from_slice(&sums[p * w..(p + 1) * w]);
                }
                let wt = if side == 0 { &wt.left } else { &wt.right };
                wt.product(r, &mut full, d, true, &gathered, (w, 1));
            }
            best_gates.clear();
            best_gates.resize(r * w, 0f32);
            // The layer's sentences, each with its own state, its selected parent's full
            // gradient and the row for that parent's gate gradient. `records` holds the
            // sentences still incomplete at layer `t`, in order.
            let mut work: Vec<_> = records
                .iter()
                .zip(
                    states
                        .iter_mut()
                        .zip(&s.lengths)
                        .filter(|&(_, &len)| len >= t + 2)
                        .map(|(st, _)| st),
                )
                .zip(full.chunks_exact(d).zip(best_gates.chunks_exact_mut(w)))
                .map(|((rec, st), (f, bg))| (rec, st, f, bg))
                .collect();
            par::items(&mut work, &|item| item.0.k * 4 * w, &|chunk| {
                let mut scratch = Scratch::new(d);
                for (rec, st, f, bg) in chunk.iter_mut() {
                    let chosen = gr(rec.b, 2 + t);
                    layer_backward(&shared, (rec, st), (f, chosen), bg, &mut scratch);
                }
            });
            for (rec, bg) in records.iter().zip(best_gates.chunks_exact(w)) {
                let ci = s.selected(rec) as usize - leaves;
                debug_assert_eq!(chosen_at[ci], u32::MAX, "a candidate is selected once");
                chosen_at[ci] = (chosen.len() / w) as u32;
                chosen.extend_from_slice(bg);
            }
        }
        let mut dlogit = vec![0f32; cands];
        for ci in 0..cands {
            let u = (leaves + ci) as u32;
            let b = owner[leaves + ci] as usize;
            dlogit[ci] = states[b].dlogit_sum[lo(u) - s.lengths[b]];
        }
        // Every candidate's gate gradient summed over the layers, `G = (selected's own) +
        // dlogit·gq`, over `gq` in place (added in that order: the selected row first, as a
        // zeroed sum would have it).
        let mut g_total = gq;
        for (ci, (&dl, row)) in dlogit.iter().zip(g_total.chunks_exact_mut(w)).enumerate() {
            match chosen_at[ci] {
                u32::MAX => row.iter_mut().for_each(|g| *g *= dl),
                at => {
                    let own = &chosen[at as usize * w..(at as usize + 1) * w];
                    for (g, &o) in row.iter_mut().zip(own) {
                        *g = o + dl * *g;
                    }
                }
            }
        }
        drop(chosen);
        drop(cq);
        // The leaves: `dh + P·W_lᵀ + Q·W_rᵀ` in two products over all of them (gathered: one
        // product per sentence costs more in calls than in arithmetic at short lengths).
        let mut lh = Vec::with_capacity(leaves * d);
        for (st, &len) in states.iter().zip(&s.lengths) {
            lh.extend_from_slice(&st.dh[..len * d]);
        }
        for side in 0..2 {
            gathered.clear();
            for (st, &len) in states.iter().zip(&s.lengths) {
                let sums = if side == 0 { &st.pp } else { &st.qq };
                gathered.extend_from_slice(&sums[..len * w]);
            }
            let wt = if side == 0 { &wt.left } else { &wt.right };
            wt.product(leaves, &mut lh, d, true, &gathered, (w, 1));
        }
        let mut leaf_h = vec![0f32; batch * n * d];
        let mut leaf_c = vec![0f32; batch * n * d];
        for (b, ((st, &len), &s0)) in states.iter().zip(&s.lengths).zip(&s.start).enumerate() {
            leaf_h[b * n * d..(b * n + len) * d].copy_from_slice(&lh[s0 * d..(s0 + len) * d]);
            leaf_c[b * n * d..(b * n + len) * d].copy_from_slice(&st.dc[..len * d]);
        }
        drop(states);
        drop((dh_all, dc_all, pp_all, qq_all, dlogit_all));
        drop(lh);
        // `dW = [h_lᵀ; h_rᵀ]·G` over the unique pairs, `db = Σ G`, `dq = Σ h·∂L/∂score / √D`.
        let mut weight = vec![0f32; 2 * d * w];
        let mut bias = vec![0f32; w];
        let mut query = vec![0f32; d];
        if cands > 0 {
            for (half, side) in [(0, 0), (d * w, 1)] {
                gathered.clear();
                for &(l, r) in &s.children {
                    let o = if side == 0 { l } else { r } as usize;
                    gathered.extend_from_slice(&s.h[o * d..(o + 1) * d]);
                }
                gemm_slices(
                    (d, w, cands),
                    &mut weight[half..half + d * w],
                    w,
                    false,
                    &gathered,
                    (1, d),
                    &g_total,
                    (w, 1),
                );
            }
            for row in g_total.chunks_exact(w) {
                add(&mut bias, row);
            }
            for (ci, &dl) in dlogit.iter().enumerate() {
                let u = leaves + ci;
                for j in 0..d {
                    query[j] += s.h[u * d + j] * dl / scale;
                }
            }
        }
        Grads {
            leaf_h,
            leaf_c,
            weight,
            bias,
            query,
        }
    }

    /// A worker's scratch for [`layer_backward`].
    struct Scratch {
        ds: Vec<f32>,
        dcl: Vec<f32>,
        dcr: Vec<f32>,
        dc_tot: Vec<f32>,
        /// A candidate's gate pre-activations, `[5D]`.
        gates: Vec<f32>,
    }

    impl Scratch {
        fn new(d: usize) -> Self {
            Scratch {
                ds: Vec::new(),
                dcl: vec![0f32; d],
                dcr: vec![0f32; d],
                dc_tot: vec![0f32; d],
                gates: vec![0f32; 5 * d],
            }
        }
    }

    /// What every sentence's [`layer_backward`] reads: the forward's values, every candidate's
    /// response to `q / √D` (`gq` `[candidates, 5D]`, `cq` `[candidates, 2D]`) and every
    /// object's sentence-local number and node number (see [`SentenceGrads`]).
    struct Shared<'a> {
        s: &'a Saved,
        gq: &'a [f32],
        cq: &'a [f32],
        local: &'a [u32],
        node: &'a [u32],
    }

    /// One sentence's layer of [`backward`]: its selection's gradient, every candidate's score
    /// share and the selected parent's cell backward (its gate gradient written to
    /// `best_gates`), all into the sentence's own state `st`. `full` is the selected parent's
    /// full `h` gradient, `chosen` the upstream gradient of the chosen parent's row. Its dot
    /// products and updates are most of the backward's time: compiled for the widest vector
    /// set in use, AVX-512 or AVX2 + FMA (chosen at run time, [`crate::isa::widest`]).
    fn layer_backward(
        x: &Shared<'_>,
        state: (&Layer, &mut SentenceGrads),
        upstream: (&[f32], &[f32]),
        best_gates: &mut [f32],
        scratch: &mut Scratch,
    ) {
        #[cfg(target_arch = "x86_64")]
        mod layer_copies {
            use super::{layer_backward_body, Layer, Scratch, SentenceGrads, Shared};

            crate::isa::simd_copies! {
                fn layer_backward(
                    x: &Shared<'_>,
                    state: (&Layer, &mut SentenceGrads),
                    upstream: (&[f32], &[f32]),
                    best_gates: &mut [f32],
                    scratch: &mut Scratch,
                ) {
                    layer_backward_body(x, state, upstream, best_gates, scratch)
                }
            }
        }
        crate::isa::widest!(
            layer_copies,
            layer_backward(x, state, upstream, best_gates, scratch)
                else layer_backward_body(x, state, upstream, best_gates, scratch)
        )
    }

    /// `⟨g, v⟩` for the local object `g`'s gradient and the object `v`'s saved values (a
    /// function, not a closure, so that it is inlined into, and compiled for the instruction set
    /// of, [`layer_backward`]'s copies).
    #[inline(always)]
    fn dot_grad(s: &Saved, st: &SentenceGrads, g: usize, v: usize) -> f32 {
        let d = s.d;
        let w = 5 * d;
        dot(&st.dh[g * d..(g + 1) * d], &s.h[v * d..(v + 1) * d])
            + dot(&st.pp[g * w..(g + 1) * w], &s.proj_l[v * w..(v + 1) * w])
            + dot(&st.qq[g * w..(g + 1) * w], &s.proj_r[v * w..(v + 1) * w])
            + dot(&st.dc[g * d..(g + 1) * d], &s.c[v * d..(v + 1) * d])
    }

    #[inline(always)]
    fn layer_backward_body(
        x: &Shared<'_>,
        (rec, st): (&Layer, &mut SentenceGrads),
        (full, chosen): (&[f32], &[f32]),
        best_gates: &mut [f32],
        scratch: &mut Scratch,
    ) {
        let s = x.s;
        let d = s.d;
        let w = 5 * d;
        let lo = |u: u32| x.local[u as usize] as usize;
        let no = |u: u32| x.node[u as usize] as usize;
        let len = s.lengths[rec.b];
        let k = rec.k;
        let (nodes, cands, y) = (s.nodes(rec), s.cands(rec), s.y(rec));
        let best = rec.best;
        let next = |i: usize| -> u32 {
            if i < best {
                nodes[i]
            } else if i == best {
                cands[best]
            } else {
                nodes[i + 1]
            }
        };
        let Scratch {
            ds,
            dcl,
            dcr,
            dc_tot,
            gates,
        } = scratch;
        ds.clear();
        ds.resize(k, 0f32);
        let mut suffix = 0f32;
        for i in (0..k).rev() {
            let g = next(i);
            let gl = no(g);
            let (xi, xn) = (nodes[i] as usize, nodes[i + 1] as usize);
            let gx = dot_grad(s, st, gl, xi);
            ds[i] = dot_grad(s, st, gl, cands[i] as usize) - gx
                + suffix
                + dot(chosen, &s.h[g as usize * d..(g as usize + 1) * d]);
            suffix += dot_grad(s, st, gl, xn) - gx;
        }
        let sy = dot(y, ds);
        for i in 0..k {
            let u = cands[i];
            let ci = u as usize - s.leaves;
            let dlogit = y[i] * (ds[i] - sy) / s.tau;
            // The score's share of the candidate's cell backward: `dlogit` times the saved
            // response to `q / √D` (the cell backward is linear in its upstream); its own
            // gate gradient's share is added once, from the sum over the layers.
            st.dlogit_sum[lo(u) - len] += dlogit;
            let (l, r) = s.children[ci];
            let (l, r) = (no(l), no(r));
            let gq = &x.gq[ci * w..(ci + 1) * w];
            let cq = &x.cq[ci * 2 * d..(ci + 1) * 2 * d];
            axpy(&mut st.pp[l * w..(l + 1) * w], dlogit, gq);
            axpy(&mut st.qq[r * w..(r + 1) * w], dlogit, gq);
            axpy(&mut st.dc[l * d..(l + 1) * d], dlogit, &cq[..d]);
            axpy(&mut st.dc[r * d..(r + 1) * d], dlogit, &cq[d..]);
            if i == best {
                // The selected parent's own gradient, through its cell.
                let p = no(u);
                cell_backward(
                    s,
                    ci,
                    full,
                    &st.dc[p * d..(p + 1) * d],
                    best_gates,
                    (dcl, dcr),
                    dc_tot,
                    gates,
                );
                add(&mut st.pp[l * w..(l + 1) * w], best_gates);
                add(&mut st.qq[r * w..(r + 1) * w], best_gates);
                add(&mut st.dc[l * d..(l + 1) * d], dcl);
                add(&mut st.dc[r * d..(r + 1) * d], dcr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cpu::{backward, forward, Inputs};
    use crate::host::Rows;
    use crate::testing::fill;
    use crate::GateLayout;

    /// The backward walks a layer's sentences in parallel, each on its own state: a batch big
    /// enough to be split across workers gives every sentence the gradients it gets alone, and
    /// the shared parameters the sum of the sentences' gradients.
    #[test]
    fn a_batch_backward_is_the_sum_of_its_sentences() {
        let (n, d) = (12, 32);
        let w = 5 * d;
        let lengths = [12, 1, 7, 12, 2, 11, 9, 12, 3, 12, 10, 12, 5, 12, 8, 12];
        let batch = lengths.len();
        let layout = GateLayout::binary_tree_lstm();
        let leaf_h = fill(batch * n * d, 1, 1.0);
        let leaf_c = fill(batch * n * d, 2, 1.0);
        let weight = fill(2 * d * w, 3, 0.3);
        let bias = fill(w, 4, 0.1);
        let query = fill(d, 5, 1.0);
        let noise = fill(batch * (n - 1) * (n - 1), 6, 1.0);
        let grad = fill(batch * (n + 1) * d, 7, 1.0);
        let run = |b: std::ops::Range<usize>| {
            let x = Inputs {
                leaf_h: Rows::contiguous(&leaf_h[b.start * n * d..b.end * n * d], d),
                leaf_c: Rows::contiguous(&leaf_c[b.start * n * d..b.end * n * d], d),
                weight: (&weight, w, 1),
                bias: Some(&bias),
                query: &query,
                noise: &noise[b.start * (n - 1) * (n - 1)..b.end * (n - 1) * (n - 1)],
                tau: 0.7,
                lengths: &lengths[b.clone()],
                n,
                d,
            };
            let (_, saved) = forward(&x, &layout);
            backward(&saved, &grad[b.start * (n + 1) * d..b.end * (n + 1) * d])
        };
        let all = run(0..batch);
        let mut sum_w = vec![0f32; 2 * d * w];
        let mut sum_b = vec![0f32; w];
        let mut sum_q = vec![0f32; d];
        let close = |a: f32, b: f32, what: &str| {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{what}: batch {a} vs alone {b}"
            );
        };
        for b in 0..batch {
            let one = run(b..b + 1);
            for (i, (&a, &o)) in all.leaf_h[b * n * d..(b + 1) * n * d]
                .iter()
                .zip(&one.leaf_h)
                .enumerate()
            {
                close(a, o, &format!("sentence {b} leaf h grad {i}"));
            }
            for (i, (&a, &o)) in all.leaf_c[b * n * d..(b + 1) * n * d]
                .iter()
                .zip(&one.leaf_c)
                .enumerate()
            {
                close(a, o, &format!("sentence {b} leaf c grad {i}"));
            }
            for (acc, v) in [
                (&mut sum_w, &one.weight),
                (&mut sum_b, &one.bias),
                (&mut sum_q, &one.query),
            ] {
                for (a, x) in acc.iter_mut().zip(v.iter()) {
                    *a += x;
                }
            }
        }
        for (what, a, o) in [
            ("weight", &all.weight, &sum_w),
            ("bias", &all.bias, &sum_b),
            ("query", &all.query, &sum_q),
        ] {
            for (i, (&a, &o)) in a.iter().zip(o.iter()).enumerate() {
                close(a, o, &format!("{what} grad {i}"));
            }
        }
        assert!(all.weight.iter().any(|&v| v != 0.0) && all.query.iter().any(|&v| v != 0.0));
    }
}

/// The CPU backends' entry point.
pub(crate) mod host {
    use std::sync::Arc;

    use burn::prelude::Backend;
    use burn::tensor::ops::FloatTensor;
    use burn::tensor::Shape;

    use super::{cpu, StGumbelTreeParts, StGumbelTreeSaved};
    use crate::host::{dims3, rows_of, HostTensor};
    use crate::GateLayout;

    /// The CPU op on `f32` tensors; `None` otherwise.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn st_gumbel_tree<B: Backend>(
        leaf_h: FloatTensor<B>,
        leaf_c: FloatTensor<B>,
        weight: FloatTensor<B>,
        bias: Option<FloatTensor<B>>,
        query: FloatTensor<B>,
        noise: FloatTensor<B>,
        tau: f64,
        lengths: &[usize],
        layout: &GateLayout,
    ) -> Option<StGumbelTreeParts<B>>
    where
        FloatTensor<B>: HostTensor,
    {
        let (batch, n, d) = dims3(&leaf_h);
        // The leaves' rows in place, as `argmax_tree` reads them.
        let (mut h_copy, mut c_copy) = (None, None);
        let lh = rows_of(&leaf_h, &mut h_copy)?;
        let lc = rows_of(&leaf_c, &mut c_copy)?;
        let (q, g) = (query.host()?, noise.host()?);
        let bias = match &bias {
            Some(b) => Some(b.host()?),
            None => None,
        };
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
            noise: &g,
            tau: tau as f32,
            lengths,
            n,
            d,
        };
        let (out, saved) = cpu::forward(&inputs, layout);
        let layers = n.saturating_sub(1);
        let t = <FloatTensor<B> as HostTensor>::from_f32;
        Some(StGumbelTreeParts {
            out: t(out.out, Shape::new([batch, n + 1, d])),
            selected: out.selected,
            probabilities: t(out.probabilities, Shape::new([batch, layers, layers])),
            saved: StGumbelTreeSaved(Arc::new(saved)),
        })
    }
}

/// `Autodiff<B>`: the pass as one graph node whose backward step is [`cpu::backward`].
pub(crate) mod autodiff {
    use burn::backend::autodiff::checkpoint::base::Checkpointer;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::autodiff::grads::Gradients;
    use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
    use burn::backend::autodiff::Autodiff;
    use burn::tensor::backend::AutodiffBackend;
    use burn::tensor::ops::FloatTensor;

    use super::{st_gumbel_tree_backward, StGumbelTreeParts, StGumbelTreeSaved};
    use crate::autodiff::backward_with;
    use crate::{ArborBackend, GateLayout};

    #[derive(Debug)]
    struct StGumbelTreeOp;

    impl<B: ArborBackend> Backward<B, 5> for StGumbelTreeOp {
        type State = StGumbelTreeSaved;

        fn backward(self, ops: Ops<Self::State, 5>, grads: &mut Gradients, _: &mut Checkpointer) {
            backward_with::<B, _, 5, _>(ops, grads, |saved, grad| {
                st_gumbel_tree_backward::<B>(&saved, grad)
            });
        }
    }

    /// The inner backend's pass, recorded as one node over the leaves, the weight, the bias
    /// (an untracked placeholder when there is none) and the query; the noise is a constant.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn st_gumbel_tree<B: ArborBackend, C: CheckpointStrategy>(
        leaf_h: FloatTensor<Autodiff<B, C>>,
        leaf_c: FloatTensor<Autodiff<B, C>>,
        weight: FloatTensor<Autodiff<B, C>>,
        bias: Option<FloatTensor<Autodiff<B, C>>>,
        query: FloatTensor<Autodiff<B, C>>,
        noise: FloatTensor<Autodiff<B, C>>,
        tau: f64,
        lengths: &[usize],
        layout: &GateLayout,
    ) -> Option<StGumbelTreeParts<Autodiff<B, C>>> {
        let bias_node = bias.as_ref().map(|b| b.node.clone());
        let parts = B::st_gumbel_tree(
            leaf_h.primitive,
            leaf_c.primitive,
            weight.primitive,
            bias.map(|b| b.primitive),
            query.primitive.clone(),
            noise.primitive,
            tau,
            lengths,
            layout,
        )?;
        // Without a bias, the fourth parent is a fresh untracked node: it gets no gradient.
        let bias_node =
            bias_node.unwrap_or_else(|| Autodiff::<B, C>::from_inner(query.primitive.clone()).node);
        let nodes = [leaf_h.node, leaf_c.node, weight.node, bias_node, query.node];
        let out = match StGumbelTreeOp
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(parts.saved.clone(), parts.out),
            OpsKind::UnTracked(prep) => prep.finish(parts.out),
        };
        Some(StGumbelTreeParts {
            out,
            selected: parts.selected,
            probabilities: Autodiff::<B, C>::from_inner(parts.probabilities),
            saved: parts.saved,
        })
    }
}
