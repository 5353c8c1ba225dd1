//! Embeds `migrations/*.cql` into the binary, so a deployed `adevents` carries the schema it
//! expects and `adevents migrate` needs no files beside it.

use std::{env, error::Error, fs, path::Path};

fn main() -> Result<(), Box<dyn Error>> {
    // Read when it runs, not baked in when it compiles: a build cache shared by clones at
    // different paths may run a script another clone compiled.
    let dir = Path::new(&env::var("CARGO_MANIFEST_DIR")?).join("migrations");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut files = Vec::new();
    for entry in fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "cql") {
            files.push(path);
        }
    }
    files.sort();
    let mut source =
        String::from("/// `(file name, contents)` of every migration, in file-name order.\n");
    source.push_str("pub(crate) const EMBEDDED: &[(&str, &str)] = &[\n");
    for path in &files {
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .ok_or_else(|| format!("migration file name is not UTF-8: {}", path.display()))?;
        source.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    source.push_str("];\n");
    fs::write(
        Path::new(&env::var("OUT_DIR")?).join("migrations.rs"),
        source,
    )?;
    Ok(())
}
