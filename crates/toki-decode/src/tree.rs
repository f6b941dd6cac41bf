//! Candidate trees, Medusa-style.
//!
//! A tree is a list of paths; path `[a0, a1, ..]` picks the a0-th ranked proposal of head 0,
//! then the a1-th of head 1, and so on. Node 0 is the root: the base model's own next
//! token. Nodes are ordered by depth, then path (so every parent precedes its children).
//!
//! Example: paths `[[0], [1], [0, 0]]` give four nodes
//!
//! ```text
//!   node 0  root (base's token)        depth 0
//!   node 1  [0]    head 0, rank 0      depth 1   parent 0
//!   node 2  [1]    head 0, rank 1      depth 1   parent 0
//!   node 3  [0,0]  head 1, rank 0      depth 2   parent 1
//!
//!   mask (row sees column)     depths      retrieve (one row per leaf path)
//!        0 1 2 3
//!   0  [ 1 . . . ]             [0,1,1,2]   [0, 2, -]   (root, [1])
//!   1  [ 1 1 . . ]                         [0, 1, 3]   (root, [0], [0,0])
//!   2  [ 1 . 1 . ]
//!   3  [ 1 1 . 1 ]
//! ```
//!
//! Position ids are the cached prefix length plus the depth.

use std::collections::BTreeSet;
use std::path::Path;

use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{DecodeError, Result};

/// Medusa's 63-node tree for Vicuna-7B (`mc_sim_7b_63` of the reference implementation).
const MEDUSA_63: &str = "[[0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0]]";
/// 8 nodes: two candidates for the next token, a chain on the best one.
const SMALL: &str = "[[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 0, 0]]";
/// 24 nodes over 4 heads.
const MEDIUM: &str = "[[0], [1], [2], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 2], [0, 2, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 2], [0, 0, 2, 0], [2, 0, 0]]";

/// A tree by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreePreset {
    /// A single chain: each head's best proposal, `depth` heads deep.
    Chain(usize),
    Small,
    Medium,
    Medusa63,
}

impl TreePreset {
    /// `chain-4`, `small`, `medium`, `medusa-63`. A chain is at least one head deep
    /// (`chain-0` is not a preset: a tree of the root alone is plain decoding).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "small" => Some(Self::Small),
            "medium" => Some(Self::Medium),
            "medusa-63" | "medusa63" => Some(Self::Medusa63),
            _ => s
                .strip_prefix("chain-")
                .and_then(|d| d.parse().ok())
                .filter(|&d| d > 0)
                .map(Self::Chain),
        }
    }

    pub fn paths(&self) -> Vec<Vec<usize>> {
        let parse = |s: &str| serde_json::from_str(s).unwrap_or_default();
        match self {
            Self::Chain(d) => (1..=*d).map(|n| vec![0; n]).collect(),
            Self::Small => parse(SMALL),
            Self::Medium => parse(MEDIUM),
            Self::Medusa63 => parse(MEDUSA_63),
        }
    }
}

/// A validated tree: nodes in order, with each node's head, rank, depth and parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// Paths of nodes 1.. (node 0, the root, has the empty path).
    paths: Vec<Vec<usize>>,
    /// parent[i] for i >= 1; parent[0] = 0.
    parent: Vec<usize>,
    /// Largest rank used per head, plus one: how many proposals each head must give.
    top_k: Vec<usize>,
}

impl Tree {
    /// Build from Medusa-style paths. Errors: an empty path, a duplicate, a path whose
    /// parent is missing, a rank >= `max_rank`, or deeper than `num_heads`.
    pub fn from_paths(paths: &[Vec<usize>], num_heads: usize, max_rank: usize) -> Result<Self> {
        let set: BTreeSet<&Vec<usize>> = paths.iter().collect();
        if set.len() != paths.len() {
            let dup = paths
                .iter()
                .find(|p| paths.iter().filter(|q| q == p).count() > 1);
            return Err(DecodeError::Tree(format!(
                "duplicate path {:?}",
                dup.cloned().unwrap_or_default()
            )));
        }
        let mut sorted: Vec<Vec<usize>> = paths.to_vec();
        sorted.sort_by(|a, b| a.len().cmp(&b.len()).then(a.cmp(b)));
        let mut top_k = vec![0; sorted.last().map_or(0, |p| p.len())];
        let mut parent = vec![0];
        for p in &sorted {
            if p.is_empty() {
                return Err(DecodeError::Tree(
                    "empty path (the root is implicit)".into(),
                ));
            }
            if p.len() > num_heads {
                return Err(DecodeError::Tree(format!(
                    "path {p:?} is {} deep but there are {num_heads} heads",
                    p.len()
                )));
            }
            if let Some(&r) = p.iter().find(|&&r| r >= max_rank) {
                return Err(DecodeError::Tree(format!(
                    "path {p:?} uses rank {r}, beyond top-{max_rank}"
                )));
            }
            let par = if p.len() == 1 {
                0
            } else {
                let pp = &p[..p.len() - 1];
                1 + sorted
                    .iter()
                    .position(|q| q.as_slice() == pp)
                    .ok_or_else(|| DecodeError::Tree(format!("path {p:?} has no parent {pp:?}")))?
            };
            parent.push(par);
            let (h, r) = (p.len() - 1, p[p.len() - 1]);
            top_k[h] = top_k[h].max(r + 1);
        }
        Ok(Self {
            paths: sorted,
            parent,
            top_k,
        })
    }

    /// Paths from a JSON file: a list of lists of ranks, or an object whose `paths` is one
    /// (what `toki calibrate` writes, with its measurements beside it).
    pub fn from_file(path: &Path, num_heads: usize, max_rank: usize) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| DecodeError::Tree(format!("{}: {e}", path.display())))?;
        let err = |e: serde_json::Error| DecodeError::Tree(format!("{}: {e}", path.display()));
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text); // a byte-order mark
        let v: serde_json::Value = serde_json::from_str(text).map_err(err)?;
        let v = match v {
            serde_json::Value::Object(mut o) => o.remove("paths").ok_or_else(|| {
                DecodeError::Tree(format!(
                    "{}: an object without `paths` (a tree file is a list of paths, or what \
                     `toki calibrate` writes)",
                    path.display()
                ))
            })?,
            other => other,
        };
        let paths: Vec<Vec<usize>> = serde_json::from_value(v).map_err(err)?;
        Self::from_paths(&paths, num_heads, max_rank)
    }

    /// The trivial tree: the root alone (plain decoding).
    pub fn root_only() -> Self {
        Self {
            paths: vec![],
            parent: vec![0],
            top_k: vec![],
        }
    }

    /// Number of nodes, root included.
    pub fn len(&self) -> usize {
        self.parent.len()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn depth(&self) -> usize {
        self.top_k.len()
    }
    /// Proposals needed from head k.
    pub fn top_k(&self) -> &[usize] {
        &self.top_k
    }
    pub fn parent(&self, node: usize) -> usize {
        self.parent[node]
    }
    /// Node `i`'s path (empty for the root).
    pub fn path(&self, node: usize) -> &[usize] {
        match node {
            0 => &[],
            i => &self.paths[i - 1],
        }
    }
    /// (head, rank) that supplies node `i` (i >= 1).
    pub fn source(&self, node: usize) -> (usize, usize) {
        let p = &self.paths[node - 1];
        (p.len() - 1, p[p.len() - 1])
    }
    pub fn node_depth(&self, node: usize) -> usize {
        if node == 0 {
            0
        } else {
            self.paths[node - 1].len()
        }
    }

    /// The buffers one verification pass needs.
    pub fn buffers(&self, device: &Device) -> TreeBuffers {
        let n = self.len();
        let mut visible = vec![false; n * n];
        for i in 0..n {
            let mut j = i;
            loop {
                visible[i * n + j] = true;
                if j == 0 {
                    break;
                }
                j = self.parent[j];
            }
        }
        let is_parent: BTreeSet<usize> = self.parent[1..].iter().copied().collect();
        let leaves: Vec<usize> = (0..n).filter(|i| !is_parent.contains(i)).collect();
        let retrieve: Vec<Vec<usize>> = leaves
            .iter()
            .map(|&leaf| {
                let mut path = vec![leaf];
                let mut j = leaf;
                while j != 0 {
                    j = self.parent[j];
                    path.push(j);
                }
                path.reverse();
                path
            })
            .collect();
        let bias: Vec<f32> = visible
            .iter()
            .map(|&v| if v { 0.0 } else { f32::NEG_INFINITY })
            .collect();
        let mut children = vec![vec![]; n];
        for node in 1..n {
            children[self.parent[node]].push(node);
        }
        TreeBuffers {
            mask: Tensor::from_data(TensorData::new(bias, [n, n]), device),
            children,
            visible,
            depths: (0..n).map(|i| self.node_depth(i)).collect(),
            retrieve,
        }
    }
}

/// What a verification pass over a tree needs, built once per tree.
#[derive(Debug, Clone)]
pub struct TreeBuffers {
    /// [N, N] additive attention bias among the tree nodes: 0 where a node sees another
    /// (its ancestors and itself), -inf elsewhere. Every node also sees the whole prefix.
    pub mask: Tensor<2>,
    /// The same mask on the host, row-major, true = visible.
    pub visible: Vec<bool>,
    /// Depth of each node; its position id is prefix length + depth.
    pub depths: Vec<usize>,
    /// For each root-to-leaf candidate path, its node indices from the root.
    pub retrieve: Vec<Vec<usize>>,
    /// Children of each node, in rank order (node order).
    pub children: Vec<Vec<usize>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example_of_the_module_docs() {
        let t = Tree::from_paths(&[vec![0], vec![1], vec![0, 0]], 4, 10).unwrap();
        let b = t.buffers(&Device::flex());
        let x = |rows: [[u8; 4]; 4]| rows.iter().flatten().map(|&v| v == 1).collect::<Vec<_>>();
        assert_eq!(
            b.visible,
            x([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]])
        );
        assert_eq!(b.depths, vec![0, 1, 1, 2]);
        assert_eq!(b.retrieve, vec![vec![0, 2], vec![0, 1, 3]]);
        assert_eq!(t.top_k(), &[2, 1]);
        assert_eq!(t.source(3), (1, 0));
    }

    #[test]
    fn chain_mask_is_causal() {
        let t = Tree::from_paths(&TreePreset::Chain(3).paths(), 3, 1).unwrap();
        let b = t.buffers(&Device::flex());
        let n = 4;
        for i in 0..n {
            for j in 0..n {
                assert_eq!(b.visible[i * n + j], j <= i);
            }
        }
        assert_eq!(b.retrieve, vec![vec![0, 1, 2, 3]]);
    }

    #[test]
    fn order_of_paths_does_not_matter() {
        let a = Tree::from_paths(&[vec![1, 0], vec![0], vec![1]], 2, 5).unwrap();
        let b = Tree::from_paths(&[vec![0], vec![1], vec![1, 0]], 2, 5).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.parent(3), 2);
    }

    #[test]
    fn invalid_trees_are_errors() {
        let e = |p: &[Vec<usize>]| Tree::from_paths(p, 3, 4).unwrap_err().to_string();
        assert!(e(&[vec![0, 0]]).contains("no parent"));
        assert!(e(&[vec![0], vec![0]]).contains("duplicate"));
        assert!(e(&[vec![5]]).contains("rank 5"));
        assert!(e(&[vec![0], vec![0, 0], vec![0, 0, 0], vec![0, 0, 0, 0]]).contains("4 deep"));
        assert!(e(&[vec![]]).contains("empty"));
    }

    #[test]
    fn a_tree_file_may_start_with_a_byte_order_mark_or_be_a_calibration() {
        let dir = std::env::temp_dir().join(format!("toki-tree-bom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tree.json");
        std::fs::write(&path, "\u{feff}[[0], [1], [0, 0]]").unwrap();
        let t = Tree::from_file(&path, 2, 2);
        // An object needs its `paths`; a calibration file's carry them.
        std::fs::write(&path, r#"{"tree": [[0]]}"#).unwrap();
        let no_paths = Tree::from_file(&path, 2, 2).unwrap_err().to_string();
        std::fs::write(&path, r#"{"paths": [[0], [0, 0]], "cost_s": [1.0]}"#).unwrap();
        let with_paths = Tree::from_file(&path, 2, 2);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(t.unwrap().len(), 4);
        assert!(no_paths.contains("without `paths`"), "{no_paths}");
        assert_eq!(with_paths.unwrap().len(), 3);
    }

    #[test]
    fn presets_are_valid() {
        for (p, n) in [
            (TreePreset::Small, 8),
            (TreePreset::Medium, 24),
            (TreePreset::Medusa63, 64),
            (TreePreset::Chain(5), 6),
        ] {
            let t = Tree::from_paths(&p.paths(), 5, 10).unwrap();
            assert_eq!(t.len(), n, "{p:?}");
        }
        assert_eq!(TreePreset::parse("chain-3"), Some(TreePreset::Chain(3)));
        assert_eq!(TreePreset::parse("nope"), None);
        // A chain of no heads, or of a negative or missing depth, is not a preset.
        for bad in ["chain-0", "chain--1", "chain-", "chain-x"] {
            assert_eq!(TreePreset::parse(bad), None, "{bad}");
        }
    }
}
