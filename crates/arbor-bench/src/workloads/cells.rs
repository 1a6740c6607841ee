//! The recurrent cells (issue: FastTrees is 20–40% faster than ON-LSTM).

use arbor_cells::names::VariantArray;
use arbor_cells::ArborBackend;
use arbor_cells::{CellKind, RecurrentStack, RecurrentStackConfig};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use serde_json::json;

use super::{backward_through, read, uniform};
use crate::harness::{Mode, Workload};
use crate::report::RatioSpec;

/// `(tag, d_input, d_hidden, chunk_size, batch, length)`: the two configurations of the
/// FastTrees paper's speed comparison.
pub const CONFIGS: [(&str, usize, usize, usize, usize, usize); 2] = [
    ("in256-h512", 256, 512, 8, 128, 25),
    ("in128-h400", 128, 400, 10, 128, 30),
];

/// One single-layer stack per cell and configuration; items are tokens.
pub fn workloads<B: ArborBackend>(device: &B::Device) -> Vec<Workload> {
    let mut out = Vec::new();
    for (tag, d_in, d_h, chunk, batch, len) in CONFIGS {
        for &kind in CellKind::VARIANTS {
            let device = device.clone();
            let params = json!({
                "cell": kind.to_string(), "d_input": d_in, "d_hidden": d_h, "chunk_size": chunk,
                "batch": batch, "length": len, "layers": 1, "seed": 0,
                "loss": "sum of all outputs",
            });
            out.push(Workload::new(
                "cells",
                format!("{tag}/{kind}"),
                params,
                batch * len,
                "tokens",
                move || {
                    B::seed(&device, 0);
                    let stack: RecurrentStack<Autodiff<B>> =
                        RecurrentStackConfig::new(kind, d_in, d_h)
                            .with_chunk_size(chunk)
                            .init(&device);
                    let eval = stack.valid();
                    let x = uniform::<B, 3>([batch, len, d_in], 1, &device);
                    let lengths = vec![len; batch];
                    Box::new(move |mode| match mode {
                        Mode::Forward => {
                            read(eval.forward(x.clone(), Some(&lengths), None).outputs.sum())
                        }
                        Mode::ForwardBackward => backward_through(&x, |xa| {
                            stack.forward(xa, Some(&lengths), None).outputs
                        }),
                    })
                },
            ));
        }
    }
    out
}

/// FastTrees and Faster FastTrees against ON-LSTM, for both configurations.
pub fn ratios() -> Vec<RatioSpec> {
    vec![
        RatioSpec {
            label: "ON-LSTM / FastTrees time (FastTrees speed-up), in256-h512",
            numerator: "cells/in256-h512/on-lstm",
            denominator: "cells/in256-h512/fasttrees",
        },
        RatioSpec {
            label: "ON-LSTM / Faster FastTrees time, in256-h512",
            numerator: "cells/in256-h512/on-lstm",
            denominator: "cells/in256-h512/faster-fasttrees",
        },
        RatioSpec {
            label: "ON-LSTM / FastTrees time (FastTrees speed-up), in128-h400",
            numerator: "cells/in128-h400/on-lstm",
            denominator: "cells/in128-h400/fasttrees",
        },
        RatioSpec {
            label: "ON-LSTM / Faster FastTrees time, in128-h400",
            numerator: "cells/in128-h400/on-lstm",
            denominator: "cells/in128-h400/faster-fasttrees",
        },
    ]
}
