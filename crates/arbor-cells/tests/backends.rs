//! Every cell runs on both CPU backends (`flex` and `ndarray`) and gives the same outputs from
//! the same weights.

mod common;

use arbor_cells::names::VariantArray;
use arbor_cells::*;
use arbor_cells::{ArborAutodiffBackend, ArborBackend};
use burn::backend::{Flex, NdArray};
use burn::module::Module;
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use common::*;

type Nd = NdArray<f32>;

/// Serialises a flex module's weights and loads them into fresh modules on both backends.
///
/// (Both sides are reloaded from the same bytes: Burn initialises parameters lazily, so a
/// clone of a never-read module would draw its own weights.)
fn same_weights<M1: Module<Flex>, M2: Module<Nd>>(flex: M1, nd: M2) -> (M1, M2) {
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes =
        Recorder::<Flex>::record(&recorder, flex.clone().into_record(), ()).expect("record");
    let rf = Recorder::<Flex>::load(&recorder, bytes.clone(), &Default::default()).expect("load");
    let rn = Recorder::<Nd>::load(&recorder, bytes, &Default::default()).expect("load");
    (flex.load_record(rf), nd.load_record(rn))
}

#[test]
fn every_cell_agrees_across_flex_and_ndarray() {
    let (b, t, d, h) = (3, 5, 6, 8);
    let lengths = [5usize, 2, 4];
    for &kind in CellKind::VARIANTS {
        let config = RecurrentStackConfig::new(kind, d, h)
            .with_chunk_size(4)
            .with_n_layers(2);
        let (flex, nd) = same_weights(
            config.init::<Flex>(&Default::default()),
            config.init::<Nd>(&Default::default()),
        );
        let x_flex = tensor::<Flex, 3>([b, t, d], 1.0, 5, &Default::default());
        let x_nd = tensor::<Nd, 3>([b, t, d], 1.0, 5, &Default::default());
        let a = flex.forward(x_flex, Some(&lengths), None);
        let n = nd.forward(x_nd, Some(&lengths), None);
        assert_close(
            &to_vec(a.outputs),
            &to_vec(n.outputs),
            1e-5,
            &kind.to_string(),
        );
        assert_close(
            &to_vec(a.last[1].c.clone()),
            &to_vec(n.last[1].c.clone()),
            1e-5,
            &kind.to_string(),
        );
        for (da, dn) in a.distances.into_iter().zip(n.distances) {
            assert_close(&to_vec(da), &to_vec(dn), 1e-5, &kind.to_string());
        }
    }
}

#[test]
fn tree_lstm_and_gumbel_agree_across_flex_and_ndarray() {
    let d = 4;
    let cfg = BinaryTreeLstmConfig::new(d).with_d_external(3);
    let (flex, nd) = same_weights(
        cfg.init::<Flex>(&Default::default()),
        cfg.init::<Nd>(&Default::default()),
    );
    fn inputs<B: ArborBackend>() -> (LstmState<B, 3>, LstmState<B, 3>, Tensor<B, 3>) {
        let dev = Default::default();
        (
            LstmState::new(
                tensor([2, 3, 4], 1.0, 1, &dev),
                tensor([2, 3, 4], 1.0, 2, &dev),
            ),
            LstmState::new(
                tensor([2, 3, 4], 1.0, 3, &dev),
                tensor([2, 3, 4], 1.0, 4, &dev),
            ),
            tensor([2, 3, 3], 1.0, 5, &dev),
        )
    }
    let (l, r, e) = inputs::<Flex>();
    let a = flex.forward(l, r, Some(e));
    let (l, r, e) = inputs::<Nd>();
    let n = nd.forward(l, r, Some(e));
    assert_close(&to_vec(a.h), &to_vec(n.h), 1e-5, "tree-lstm h");
    assert_close(&to_vec(a.c), &to_vec(n.c), 1e-5, "tree-lstm c");

    let noise_f = GumbelSampler::seeded(4).sample::<Flex, 2>([5, 6], &Default::default());
    let noise_n = GumbelSampler::seeded(4).sample::<Nd, 2>([5, 6], &Default::default());
    assert_close(
        &to_vec(noise_f.clone()),
        &to_vec(noise_n.clone()),
        1e-6,
        "seeded noise",
    );
    let sf = st_gumbel_softmax(
        tensor::<Flex, 2>([5, 6], 1.0, 6, &Default::default()),
        None,
        1.0,
        Some(noise_f),
    );
    let sn = st_gumbel_softmax(
        tensor::<Nd, 2>([5, 6], 1.0, 6, &Default::default()),
        None,
        1.0,
        Some(noise_n),
    );
    assert_close(&to_vec(sf.soft), &to_vec(sn.soft), 1e-5, "gumbel soft");
    assert_eq!(
        sf.index.into_data().convert::<i64>(),
        sn.index.into_data().convert::<i64>()
    );
}

/// Gradients too: every cell's weight gradients through a padded two-layer stack agree between
/// `Autodiff<Flex>` and `Autodiff<NdArray>` (training runs on flex; the finite-difference checks
/// in `gradients.rs` run on ndarray).
#[test]
fn every_cell_gradient_agrees_across_flex_and_ndarray() {
    use burn::backend::Autodiff;
    use burn::module::Param;
    type AF = Autodiff<Flex>;
    type AN = Autodiff<Nd>;
    let (b, t, d, h) = (3, 5, 6, 8);
    let lengths = [5usize, 2, 4];
    fn grads<B: ArborAutodiffBackend>(
        stack: RecurrentStack<B>,
        lengths: &[usize],
        shape: [usize; 3],
    ) -> Vec<Vec<f64>> {
        let x = tensor::<B, 3>(shape, 1.0, 5, &Default::default()).require_grad();
        let out = stack.forward(x.clone(), Some(lengths), None);
        let [_, _, w] = out.outputs.dims();
        let weights = tensor::<B, 3>([shape[0], shape[1], w], 1.0, 9, &Default::default());
        let g = out.outputs.mul(weights).sum().backward();
        let mut all = vec![to_vec(x.grad(&g).expect("input gradient"))];
        // Every parameter's gradient, in module order.
        struct Collect<'a, B: burn::tensor::backend::AutodiffBackend> {
            g: &'a B::Gradients,
            out: Vec<Vec<f64>>,
        }
        impl<B: ArborAutodiffBackend> burn::module::ModuleVisitor<B> for Collect<'_, B> {
            fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<B, D>>) {
                if let Some(gr) = p.val().grad(self.g) {
                    self.out.push(to_vec(gr));
                }
            }
        }
        let mut c = Collect::<B> {
            g: &g,
            out: Vec::new(),
        };
        stack.visit(&mut c);
        all.extend(c.out);
        all
    }
    for &kind in CellKind::VARIANTS {
        let config = RecurrentStackConfig::new(kind, d, h)
            .with_chunk_size(4)
            .with_n_layers(2);
        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let base = config.init::<Flex>(&Default::default());
        let bytes = Recorder::<Flex>::record(&recorder, base.into_record(), ()).expect("record");
        let rf = Recorder::<AF>::load(&recorder, bytes.clone(), &Default::default()).expect("load");
        let rn = Recorder::<AN>::load(&recorder, bytes, &Default::default()).expect("load");
        let flex = config.init::<AF>(&Default::default()).load_record(rf);
        let nd = config.init::<AN>(&Default::default()).load_record(rn);
        let gf = grads(flex, &lengths, [b, t, d]);
        let gn = grads(nd, &lengths, [b, t, d]);
        assert_eq!(gf.len(), gn.len(), "{kind}");
        for (k, (a, n)) in gf.iter().zip(&gn).enumerate() {
            assert_close(a, n, 1e-4, &format!("{kind} gradient {k}"));
        }
    }
}
