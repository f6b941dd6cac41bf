//! `--tree` and `--tree-mode`: which tree speculative steps verify (generate and bench).

use std::path::Path;

use anyhow::{Context, Result, bail};
use toki_decode::{
    Datastore, DynamicTree, Engine, HeadProposer, Lookup, Prompt, Proposer, Tree, TreePreset,
};

use crate::backend::Backend;
use crate::cmd::calibrate;

/// How `auto` and calibration files are used.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeMode {
    /// Size the tree each step from the heads' confidence and the measured cost curve.
    Dynamic,
    /// Verify the calibrated tree every step.
    Static,
}

#[derive(clap::Args, Debug, Clone)]
pub struct TreeArgs {
    /// Candidate tree: a preset (chain-N, small, medium, medusa-63; cut to the heads'
    /// depth: chain-9 on 3 heads is chain-3), a JSON file (a list of paths, or what `toki
    /// calibrate` writes), or `auto` (measure this backend now). Default: the heads
    /// folder's calibration for this backend (HEADS_DIR/tree-cpu.json, tree-wgpu.json,
    /// tree-cuda.json) where there is one, else `small`.
    #[arg(long)]
    pub tree: Option<String>,
    /// For `auto` and `toki calibrate` files: a tree sized each step from the heads'
    /// confidence (dynamic) or the calibrated tree every step (static). Presets and
    /// path lists are static.
    #[arg(long, value_enum, default_value_t = TreeMode::Dynamic)]
    pub tree_mode: TreeMode,
    /// Prompt lookup on dynamic trees: graft up to N tokens that followed an earlier
    /// occurrence of the last 2-4 tokens (prompt or answer) onto each step's tree, as
    /// deep as they are worth verifying. 0 = off.
    #[arg(long, default_value_t = 8)]
    pub lookup: usize,
    /// Datastore lookup on dynamic trees: the most frequent continuation of the last 2-4
    /// tokens in a corpus of the base's earlier answers (`toki datastore`), grafted on like
    /// prompt lookup's chains. A file, or `none`; by default the heads folder's
    /// datastore.safetensors where there is one.
    #[arg(long)]
    pub datastore: Option<String>,
}

impl TreeArgs {
    /// What `--lookup` asks for (`None`: off).
    pub fn lookup(&self) -> Option<Lookup> {
        (self.lookup > 0).then(|| Lookup {
            max_len: self.lookup,
            ..Lookup::default()
        })
    }

    /// What `--datastore` asks for, next to heads from `heads_dir`.
    pub fn datastore(&self, heads_dir: &Path) -> Result<Option<Datastore>> {
        let path = match self.datastore.as_deref() {
            Some("none") => return Ok(None),
            Some(file) => Path::new(file).to_path_buf(),
            None => {
                let default = heads_dir.join(crate::cmd::datastore::FILE);
                if !default.exists() {
                    return Ok(None);
                }
                default
            }
        };
        let ds = Datastore::load(&path)?;
        tracing::info!("datastore: {} tokens from {}", ds.len(), path.display());
        Ok(Some(ds))
    }
}

/// The tree a request's speculative steps verify.
#[derive(Debug, Clone)]
pub enum Chosen {
    Static(Tree),
    Dynamic(DynamicTree),
}

impl Chosen {
    /// For logs and reports: "static, N nodes, depth D" or "dynamic, up to N nodes" with
    /// the ceiling of its cost curve for `num_heads` heads ([`DynamicTree::ceiling`]), and
    /// the prompt lookup and datastore `install` would add.
    pub fn describe(
        &self,
        num_heads: usize,
        lookup: Option<Lookup>,
        datastore: Option<&Datastore>,
    ) -> String {
        let d = match self {
            Self::Static(t) => return format!("static, {} nodes, depth {}", t.len(), t.depth()),
            Self::Dynamic(d) => d,
        };
        let (most, chain) = d.ceiling(num_heads);
        let mut s = format!(
            "dynamic, up to {} nodes (with every proposal right at most {most:.2}x plain, a chain of {chain})",
            d.max_nodes()
        );
        if let Some(l) = lookup {
            s += &format!(", prompt lookup up to {} tokens", l.max_len);
        }
        if let Some(ds) = datastore {
            s += &format!(", datastore of {} tokens", ds.len());
        }
        s
    }

    /// Speculation on `engine` with `heads`, and prompt lookup and the datastore where the
    /// tree is dynamic (static trees verify fixed nodes: they use neither).
    pub fn install(
        self,
        engine: Engine,
        heads: HeadProposer,
        lookup: Option<Lookup>,
        datastore: Option<Datastore>,
    ) -> Result<Engine> {
        Ok(match self {
            Self::Static(tree) => engine.with_proposer(Box::new(heads), tree)?,
            Self::Dynamic(d) => engine
                .with_dynamic_tree(Box::new(heads), d)?
                .with_lookup(lookup)?
                .with_datastore(datastore)?,
        })
    }
}

/// The preset `--tree` falls back to where the heads folder has no calibration for the
/// backend.
pub const FALLBACK_PRESET: &str = "small";

/// The calibration a heads folder keeps for `backend` (`toki calibrate --out` it there).
pub fn calibration_file(heads_dir: &Path, backend: Backend) -> std::path::PathBuf {
    heads_dir.join(format!("tree-{}.json", backend.name()))
}

impl TreeArgs {
    /// What `--tree` names; left out, the heads folder's calibration for `backend` where
    /// there is one (a tree measured for that hardware: a preset sized for a GPU can make a
    /// CPU slower than plain decoding), else [`FALLBACK_PRESET`].
    pub fn spec(&self, heads_dir: &Path, backend: Backend) -> String {
        if let Some(tree) = &self.tree {
            return tree.clone();
        }
        let file = calibration_file(heads_dir, backend);
        let spec = if file.is_file() {
            file.display().to_string()
        } else {
            FALLBACK_PRESET.to_string()
        };
        tracing::info!("no --tree: {spec} (for the {} backend)", backend.name());
        spec
    }

    /// Resolve `--tree` (see [`Self::spec`]). `auto` measures this backend now: on `calib`
    /// prompts (cost curve and head accuracy), or with none the cost curve alone (a
    /// dynamic tree then trusts the heads' probabilities as they are; a static one needs
    /// prompts).
    pub fn resolve(
        &self,
        engine: &Engine,
        heads: &HeadProposer,
        heads_dir: &Path,
        backend: Backend,
        calib: &[Prompt],
        max_new: usize,
    ) -> Result<Chosen> {
        let spec = self.spec(heads_dir, backend);
        if spec == "auto" {
            if calib.is_empty() {
                if self.tree_mode == TreeMode::Static {
                    bail!("--tree auto --tree-mode static needs calibration prompts");
                }
                return Ok(Chosen::Dynamic(
                    calibrate::costs_on_sample(engine, heads)?.dynamic(vec![])?,
                ));
            }
            let c = calibrate::auto_tree(engine, heads, calib, max_new)?;
            eprintln!("--tree auto: {}", c.summary());
            return Ok(match self.tree_mode {
                TreeMode::Dynamic => Chosen::Dynamic(c.dynamic),
                TreeMode::Static => Chosen::Static(c.tree),
            });
        }
        load(&spec, self.tree_mode, heads.num_heads())
    }
}

/// A preset, a path-list file, or a calibration file (its dynamic or static tree).
pub fn load(spec: &str, mode: TreeMode, num_heads: usize) -> Result<Chosen> {
    /// Ranks beyond this are never useful and would make the proposer sort the vocabulary.
    const MAX_RANK: usize = 64;
    if let Some(preset) = TreePreset::parse(spec) {
        let paths: Vec<Vec<usize>> = preset
            .paths()
            .into_iter()
            .filter(|p| p.len() <= num_heads)
            .collect();
        return Ok(Chosen::Static(Tree::from_paths(
            &paths, num_heads, MAX_RANK,
        )?));
    }
    let path = Path::new(spec);
    if !path.exists() {
        bail!(
            "--tree {spec:?} is neither a preset (chain-N with N >= 1, small, medium, medusa-63), `auto`, nor a file"
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {spec}"))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text); // a byte-order mark
    let v: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("{spec}: not JSON"))?;
    match v.get("dynamic") {
        Some(d) if mode == TreeMode::Dynamic => {
            let d: DynamicTree = serde_json::from_value(d.clone())
                .with_context(|| format!("{spec}: `dynamic` is not a dynamic tree"))?;
            // Re-checked: the file may have been edited.
            let d = DynamicTree::new(d.cost, d.heads_cost, d.max_rank, d.accuracy)
                .and_then(|t| t.with_contexts(d.context, d.longer))
                .with_context(|| spec.to_string())?;
            Ok(Chosen::Dynamic(d))
        }
        _ => Ok(Chosen::Static(Tree::from_file(path, num_heads, MAX_RANK)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toki_model::testing::ScratchDir;

    fn args(tree: Option<&str>) -> TreeArgs {
        TreeArgs {
            tree: tree.map(str::to_string),
            tree_mode: TreeMode::Dynamic,
            lookup: 8,
            datastore: None,
        }
    }

    /// Left out, `--tree` is the heads folder's calibration for the backend in use, and the
    /// preset only where the folder has none; a named tree always wins.
    #[test]
    fn the_default_tree_is_the_heads_calibration_for_this_backend() {
        let heads = ScratchDir::new("cli-tree-default").expect("scratch dir");
        assert_eq!(args(None).spec(&heads, Backend::Cpu), FALLBACK_PRESET);
        let cpu = calibration_file(&heads, Backend::Cpu);
        assert!(cpu.ends_with("tree-cpu.json"), "{}", cpu.display());
        std::fs::write(&cpu, "[[0]]").expect("tree file");
        assert_eq!(
            args(None).spec(&heads, Backend::Cpu),
            cpu.display().to_string()
        );
        assert_eq!(args(None).spec(&heads, Backend::Wgpu), FALLBACK_PRESET);
        assert_eq!(args(Some("medium")).spec(&heads, Backend::Cpu), "medium");
        assert_eq!(args(Some("auto")).spec(&heads, Backend::Cpu), "auto");
    }
}
