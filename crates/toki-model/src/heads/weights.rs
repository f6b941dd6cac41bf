//! Building heads from weights: fresh, random, named tensors, the native and reference
//! files; and saving them.

use std::path::Path;

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{DType, Device, Tensor, TensorData};
use safetensors::{Dtype, tensor::TensorView};

use super::{Head, HeadInput, HeadKind, HeadsConfig, MedusaHeads, ResBlock, StoreDtype};
use crate::error::{ModelError, Result};
use crate::llama::{LlamaModel, transpose};
use crate::weights::{SafetensorsWeights, WeightSource};

fn heads_err(path: &Path, msg: impl ToString) -> ModelError {
    ModelError::Heads {
        path: path.to_path_buf(),
        msg: msg.to_string(),
    }
}

fn tensor2(data: Vec<f32>, shape: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(data, shape), device)
}

/// Key names of one head-file layout.
trait Layout {
    /// F_head,j (j = 0: the next token's, the only one of `HiddenAndNext` heads).
    fn path_weight(&self, head: usize, j: usize) -> String;
    fn block_weight(&self, head: usize, block: usize) -> String;
    fn block_bias(&self, head: usize, block: usize) -> String;
    fn lm_head(&self, head: usize) -> String;
}

struct Native;
impl Layout for Native {
    fn path_weight(&self, h: usize, j: usize) -> String {
        match j {
            0 => format!("heads.{h}.next.weight"),
            _ => format!("heads.{h}.path.{j}.weight"),
        }
    }
    fn block_weight(&self, h: usize, b: usize) -> String {
        format!("heads.{h}.blocks.{b}.weight")
    }
    fn block_bias(&self, h: usize, b: usize) -> String {
        format!("heads.{h}.blocks.{b}.bias")
    }
    fn lm_head(&self, h: usize) -> String {
        format!("heads.{h}.lm_head.weight")
    }
}

/// The reference Medusa: `{head}.{block}.linear.weight`, `{head}.{L}.weight`.
struct Reference {
    layers: usize,
}
impl Layout for Reference {
    // The reference heads read the hidden state only; a config never asks for this.
    fn path_weight(&self, h: usize, j: usize) -> String {
        format!("{h}.path.{j}.weight")
    }
    fn block_weight(&self, h: usize, b: usize) -> String {
        format!("{h}.{b}.linear.weight")
    }
    fn block_bias(&self, h: usize, b: usize) -> String {
        format!("{h}.{b}.linear.bias")
    }
    fn lm_head(&self, h: usize) -> String {
        format!("{h}.{}.weight", self.layers)
    }
}

impl MedusaHeads {
    /// Fresh heads: zero residual blocks (an untrained head starts at the base's own
    /// prediction), own lm_heads copied from the base's.
    pub fn init(config: HeadsConfig, base: &LlamaModel) -> Result<Self> {
        let mut src = InitSource {
            base: base.lm_head().weight.val(),
        };
        Self::build(config, &mut src, &Native, &base.device())
    }

    /// Seeded random heads (tests: acceptance then varies from step to step).
    pub fn random(config: HeadsConfig, seed: u64, std: f32, device: &Device) -> Result<Self> {
        let mut src = crate::weights::RandomWeights { seed, std };
        Self::build(config, &mut src, &Native, device)
    }

    /// Heads from named tensors in the native layout (`heads.{h}.next.weight` [D, D] for
    /// the `HiddenAndNext` and `HiddenAndPath` inputs, `heads.{h}.path.{j}.weight` [D, D]
    /// for j = 1..=h with `HiddenAndPath`, `heads.{h}.blocks.{b}.weight` [D, D] as [out, in], `.bias`
    /// [D], `heads.{h}.lm_head.weight` [V, D] for the own kind).
    pub fn from_source(
        config: HeadsConfig,
        src: &mut dyn WeightSource,
        device: &Device,
    ) -> Result<Self> {
        Self::build(config, src, &Native, device)
    }

    /// The native names and shapes of a head set's tensors, in file order.
    pub fn tensor_names(config: &HeadsConfig) -> Vec<(String, Vec<usize>)> {
        let (d, v) = (config.hidden_size, config.vocab_size);
        let mut out = vec![];
        for h in 0..config.num_heads {
            for j in 0..config.input.path_len(h) {
                out.push((Native.path_weight(h, j), vec![d, d]));
            }
            for b in 0..config.num_layers {
                out.push((Native.block_weight(h, b), vec![d, d]));
                out.push((Native.block_bias(h, b), vec![d]));
            }
            if config.kind == HeadKind::Own {
                out.push((Native.lm_head(h), vec![v, d]));
            }
        }
        out
    }

    fn build(
        config: HeadsConfig,
        src: &mut dyn WeightSource,
        layout: &dyn Layout,
        device: &Device,
    ) -> Result<Self> {
        let (d, v) = (config.hidden_size, config.vocab_size);
        if config.num_heads == 0 {
            return Err(ModelError::Heads {
                path: Default::default(),
                msg: "a head set needs at least one head".into(),
            });
        }
        // Grown as heads load, not reserved from heads.json: a count beyond the file's
        // tensors fails at the first missing one.
        let mut heads = Vec::new();
        let square = |w: Vec<f32>| Linear {
            weight: Param::from_tensor(tensor2(transpose(&w, d, d), [d, d], device)),
            bias: None,
        };
        for h in 0..config.num_heads {
            let path = (0..config.input.path_len(h))
                .map(|j| Ok(square(src.tensor(&layout.path_weight(h, j), &[d, d])?)))
                .collect::<Result<Vec<_>>>()?;
            let mut blocks = Vec::new();
            for b in 0..config.num_layers {
                let w = src.tensor(&layout.block_weight(h, b), &[d, d])?;
                let bias = src.tensor(&layout.block_bias(h, b), &[d])?;
                blocks.push(ResBlock {
                    linear: Linear {
                        weight: Param::from_tensor(tensor2(transpose(&w, d, d), [d, d], device)),
                        bias: Some(Param::from_tensor(Tensor::from_data(
                            TensorData::new(bias, [d]),
                            device,
                        ))),
                    },
                });
            }
            let lm_head = match config.kind {
                HeadKind::Shared => None,
                HeadKind::Own => {
                    let w = src.tensor(&layout.lm_head(h), &[v, d])?;
                    Some(Linear {
                        weight: Param::from_tensor(tensor2(transpose(&w, v, d), [d, v], device)),
                        bias: None,
                    })
                }
            };
            heads.push(Head {
                path,
                blocks,
                lm_head,
            });
        }
        src.finish(&|_| false)?;
        Ok(Self {
            heads,
            config,
            host: None,
        })
    }

    /// Load heads from a folder: native (`heads.json`) or reference Medusa
    /// (`medusa_lm_head.safetensors` + `config.json`). Checked against `base`.
    pub fn load(dir: &Path, base: &LlamaModel) -> Result<Self> {
        let native = dir.join("heads.json");
        let (config, file, layout): (HeadsConfig, _, Box<dyn Layout>) = if native.exists() {
            let cfg = HeadsConfig::read(dir)?;
            (cfg, dir.join("heads.safetensors"), Box::new(Native))
        } else {
            let cfg_path = dir.join("config.json");
            let file = dir.join("medusa_lm_head.safetensors");
            if !file.exists() {
                return Err(heads_err(
                    dir,
                    "no heads.json (toki) or medusa_lm_head.safetensors (reference Medusa) in this folder",
                ));
            }
            let text =
                std::fs::read_to_string(&cfg_path).map_err(|e| ModelError::io(&cfg_path, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| heads_err(&cfg_path, e))?;
            let field = |k: &str| {
                v.get(k)
                    .and_then(|x| x.as_u64())
                    .map(|x| x as usize)
                    .ok_or_else(|| heads_err(&cfg_path, format!("missing `{k}`")))
            };
            let (num_heads, num_layers) = (field("medusa_num_heads")?, field("medusa_num_layers")?);
            // The reference always has own lm_heads; sizes are read off the tensors below.
            let cfg = HeadsConfig {
                kind: HeadKind::Own,
                num_heads,
                num_layers,
                hidden_size: base.config().hidden_size,
                vocab_size: base.config().vocab_size,
                base_model: v
                    .get("base_model_name_or_path")
                    .and_then(|x| x.as_str())
                    .unwrap_or_default()
                    .into(),
                draft_vocab: 0,
                input: HeadInput::Hidden,
                dtype: StoreDtype::F32,
            };
            (cfg, file, Box::new(Reference { layers: num_layers }))
        };
        let c = base.config();
        if config.hidden_size != c.hidden_size {
            return Err(ModelError::HeadsMismatch {
                what: "hidden size",
                heads: config.hidden_size,
                base: c.hidden_size,
            });
        }
        if config.vocab_size != c.vocab_size {
            return Err(ModelError::HeadsMismatch {
                what: "vocabulary size",
                heads: config.vocab_size,
                base: c.vocab_size,
            });
        }
        let mut src = SafetensorsWeights::open_file(&file)?;
        // Shapes in the file decide: a head set for another model fails with both sizes named.
        let probe = layout.block_weight(0, 0);
        if let Some(shape) = src.shape(&probe)
            && shape.first() != Some(&c.hidden_size)
        {
            return Err(ModelError::HeadsMismatch {
                what: "hidden size",
                heads: shape[0],
                base: c.hidden_size,
            });
        }
        Self::build(config, &mut src, layout.as_ref(), &base.device())
    }

    /// Write `heads.safetensors` (in the config's [`StoreDtype`]) + `heads.json` into `dir`
    /// (each via a temp file + rename).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        let c = &self.config;
        let (d, v) = (c.hidden_size, c.vocab_size);
        let mut named: Vec<(String, Vec<usize>, Vec<u8>)> = vec![];
        let bytes = |t: Tensor<2>| -> Result<Vec<f32>> {
            t.cast(DType::F32)
                .try_into_vec_as::<f32>()
                .map_err(|e| heads_err(dir, e))
        };
        // A [rows, cols] Burn tensor ([in, out] for weights) as the file's [cols, rows] bytes.
        let entry = |name: String, t: Tensor<2>, rows: usize, cols: usize, shape: Vec<usize>| {
            let w = transpose(&bytes(t)?, rows, cols);
            let le: Vec<u8> = match c.dtype {
                StoreDtype::F32 => w.iter().flat_map(|x| x.to_le_bytes()).collect(),
                StoreDtype::F16 => w
                    .iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect(),
            };
            Ok::<_, ModelError>((name, shape, le))
        };
        for (h, head) in self.heads.iter().enumerate() {
            for (j, f) in head.path.iter().enumerate() {
                named.push(entry(
                    Native.path_weight(h, j),
                    f.weight.val(),
                    d,
                    d,
                    vec![d, d],
                )?);
            }
            for (b, blk) in head.blocks.iter().enumerate() {
                let w = blk.linear.weight.val();
                named.push(entry(Native.block_weight(h, b), w, d, d, vec![d, d])?);
                let bias = blk
                    .linear
                    .bias
                    .as_ref()
                    .map(|b| b.val().reshape([1, d]))
                    .ok_or_else(|| heads_err(dir, "block without bias"))?;
                named.push(entry(Native.block_bias(h, b), bias, 1, d, vec![d])?);
            }
            if let Some(lm) = &head.lm_head {
                named.push(entry(Native.lm_head(h), lm.weight.val(), d, v, vec![v, d])?);
            }
        }
        let views: Vec<(String, TensorView<'_>)> = named
            .iter()
            .map(|(n, s, b)| {
                let dtype = match c.dtype {
                    StoreDtype::F32 => Dtype::F32,
                    StoreDtype::F16 => Dtype::F16,
                };
                TensorView::new(dtype, s.clone(), b)
                    .map(|t| (n.clone(), t))
                    .map_err(|e| heads_err(dir, e))
            })
            .collect::<Result<_>>()?;
        let st = dir.join("heads.safetensors");
        let tmp = dir.join("heads.safetensors.tmp");
        safetensors::serialize_to_file(views, None, &tmp).map_err(|e| heads_err(&tmp, e))?;
        std::fs::rename(&tmp, &st).map_err(|e| ModelError::io(&st, e))?;
        let json = dir.join("heads.json");
        let tmp = dir.join("heads.json.tmp");
        let text = serde_json::to_string_pretty(&self.config).map_err(|e| heads_err(&json, e))?;
        std::fs::write(&tmp, text).map_err(|e| ModelError::io(&tmp, e))?;
        std::fs::rename(&tmp, &json).map_err(|e| ModelError::io(&json, e))
    }
}

/// Initial weights: zero blocks, lm_heads copied from the base.
struct InitSource {
    /// The base lm_head, [D, V].
    base: Tensor<2>,
}

impl WeightSource for InitSource {
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        if name.ends_with("lm_head.weight") {
            let [d, v] = self.base.dims();
            let w: Vec<f32> = self
                .base
                .clone()
                .cast(DType::F32)
                .try_into_vec_as()
                .map_err(|e| ModelError::Heads {
                    path: Default::default(),
                    msg: e.to_string(),
                })?;
            Ok(transpose(&w, d, v))
        } else {
            Ok(vec![0.0; shape.iter().product()])
        }
    }
    fn contains(&self, _: &str) -> bool {
        true
    }
    fn finish(&self, _: &dyn Fn(&str) -> bool) -> Result<()> {
        Ok(())
    }
}
