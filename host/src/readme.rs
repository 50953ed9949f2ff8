//! The README's Rust examples are the doc examples of [`runtime`](crate::runtime) ("A
//! program") and [`session`](crate::session) ("A session"), which `cargo test --doc` runs:
//! the README shows each one's visible lines, verbatim and in that order, so neither can
//! change without the other.

/// The README, whose ```` ```rust ```` blocks are checked here.
const README: &str = include_str!("../../README.md");

/// The first fenced block of `source`'s inner doc (`//!`), without the lines rustdoc hides
/// (`# …` and a lone `#`).
fn doc_example(source: &str) -> String {
    let docs = source
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l));
    let mut lines = docs.skip_while(|l| !l.starts_with("```")).skip(1);
    let block = lines.by_ref().take_while(|l| !l.starts_with("```"));
    let visible: Vec<&str> = block
        .filter(|l| *l != "#" && !l.starts_with("# "))
        .collect();
    visible.join("\n")
}

/// Every ```` ```rust ```` block of `markdown`, in order.
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines();
    while lines.by_ref().any(|l| l.trim_end() == "```rust") {
        let block: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        blocks.push(block.join("\n"));
    }
    blocks
}

#[test]
fn readme_examples_are_the_doc_examples() {
    let compiled = [
        ("runtime", doc_example(include_str!("runtime/mod.rs"))),
        ("session", doc_example(include_str!("session/mod.rs"))),
    ];
    let readme = rust_blocks(README);
    assert_eq!(
        readme.len(),
        compiled.len(),
        "the README has {} Rust blocks; each must be one of the compiled examples",
        readme.len()
    );
    for ((module, example), shown) in compiled.iter().zip(&readme) {
        assert!(!example.is_empty(), "{module}'s module doc has no example");
        assert_eq!(
            shown, example,
            "the README's copy of the {module} example differs from the doc example in \
             host/src/{module}/mod.rs"
        );
    }
}

#[test]
fn hidden_lines_and_other_languages_are_left_out() {
    let source = "//! Text.\n//!\n//! ```\n//! let a = 1;\n//! # let b = 2;\n//! #\n\
                  //! #[derive(Debug)]\n//! ```\n//! ```\n//! second\n//! ```\nfn f() {}\n";
    assert_eq!(doc_example(source), "let a = 1;\n#[derive(Debug)]");
    let markdown = "```sh\nls\n```\n\n```rust\nlet a = 1;\n\nlet b = 2;\n```\n```rust\nx\n```\n";
    assert_eq!(rust_blocks(markdown), ["let a = 1;\n\nlet b = 2;", "x"]);
}
