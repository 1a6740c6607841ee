//! Pooling of the recurrent encoders' sentence vector: last, mean, max over the real words.

mod common;

use arbor_encoders::*;
use common::*;

const D_IN: usize = 4;
const H: usize = 6;
const LENGTHS: [usize; 3] = [4, 1, 3];
const TIME: usize = 5;

#[test]
fn pooling_reads_the_real_outputs_only() {
    let x = padded_batch::<Fx>(&LENGTHS, TIME, D_IN, 3);
    for &pooling in <Pooling as arbor_cells::names::VariantArray>::VARIANTS {
        let enc: LstmEncoder<Fx> = LstmEncoderConfig::new(D_IN, H)
            .with_n_layers(2)
            .with_cell(arbor_cells::CellKind::FastTrees)
            .with_chunk_size(3)
            .with_pooling(pooling)
            .init(&dev::<Fx>());
        assert_eq!(pooling.to_string().parse::<Pooling>(), Ok(pooling));
        let out = enc.encode(
            EncoderInput::new(x.clone(), LENGTHS.to_vec()),
            Decisions::Argmax,
        );
        assert_eq!(out.sentence.dims(), [LENGTHS.len(), H]);
        let tokens = out.tokens.expect("outputs");
        for (b, &len) in LENGTHS.iter().enumerate() {
            let real: Vec<Vec<f64>> = (0..len)
                .map(|t| to_vec(tokens.clone().narrow(0, b, 1).narrow(1, t, 1)))
                .collect();
            let want: Vec<f64> = (0..H)
                .map(|j| match pooling {
                    Pooling::Last => real[len - 1][j],
                    Pooling::Mean => real.iter().map(|r| r[j]).sum::<f64>() / len as f64,
                    Pooling::Max => real.iter().map(|r| r[j]).fold(f64::MIN, f64::max),
                })
                .collect();
            let what = format!("{pooling}, example {b}");
            assert_close(&row(&out.sentence, b), &want, 1e-5, &what);
            // The same sentence alone gives the same vector (padding is never pooled).
            let single = enc.encode(
                EncoderInput::new(alone(&x, b, len), vec![len]),
                Decisions::Argmax,
            );
            assert_close(
                &row(&out.sentence, b),
                &to_vec(single.sentence),
                1e-5,
                &what,
            );
        }
    }
    // The default is `Last`, and unknown names are refused.
    assert_eq!(LstmEncoderConfig::new(1, 1).pooling, Pooling::Last);
    assert!("median".parse::<Pooling>().is_err());
}
