//! The skill library's files: `<dataDir>/skills/<id>.yaml`, read-only to
//! the hub. Only regular files are read (a symbolic link in a file's
//! place is never followed), each at most 64 KiB; a list reads at most 256
//! files and fails beyond that. A malformed file is reported in the list
//! beside the good ones; reading it alone is refused.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{expand, is_valid_id, parse, Served, Skill, SkillError, MAX_FILES, MAX_FILE_BYTES};
use crate::util::fsutil::{self, BoundedRead};

const SUFFIX: &str = ".yaml";

/// The skills of one data directory.
pub struct Skills {
    dir: PathBuf,
}

/// A list: the skills served, and the files that could not be, by id.
#[derive(Debug, Default)]
pub struct Listing {
    pub skills: Vec<Served>,
    pub errors: Vec<(String, String)>,
}

impl Skills {
    /// Opens `<data_dir>/skills`, creating it (0700).
    pub fn open(data_dir: &Path) -> io::Result<Skills> {
        let dir = data_dir.join("skills");
        fsutil::create_private_dir(&dir)?;
        Ok(Skills { dir })
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{SUFFIX}"))
    }

    /// Reads one file (not expanded).
    fn read(&self, id: &str) -> Result<Skill, SkillError> {
        if !is_valid_id(id) {
            return Err(SkillError::InvalidId);
        }
        let text =
            fsutil::read_regular_bounded(&self.path(id), MAX_FILE_BYTES).map_err(
                |err| match err {
                    BoundedRead::NotFound => SkillError::NotFound,
                    BoundedRead::NotRegular => SkillError::Invalid(
                        "a skill must be a regular file (not a symbolic link)".into(),
                    ),
                    BoundedRead::TooLarge => SkillError::Invalid(format!(
                        "a skill file is at most {MAX_FILE_BYTES} bytes"
                    )),
                    BoundedRead::NotUtf8 => {
                        SkillError::Invalid("a skill file must be UTF-8".into())
                    }
                    BoundedRead::Io(err) => {
                        SkillError::Storage(format!("cannot read the skill: {err}"))
                    }
                },
            )?;
        parse(&text)
    }

    /// One skill, its references expanded (reading the files it names).
    pub fn get(&self, id: &str) -> Result<Served, SkillError> {
        let skill = self.read(id)?;
        let mut seen: HashMap<String, Skill> = HashMap::new();
        let mut lookup = |target: &str| -> Result<Skill, SkillError> {
            if let Some(found) = seen.get(target) {
                return Ok(found.clone());
            }
            let found = self.read(target)?;
            seen.insert(target.to_string(), found.clone());
            Ok(found)
        };
        expand(id, skill, &mut lookup)
    }

    /// Every skill, sorted by id, with each file that cannot be served
    /// listed under `errors` (an id that is not a skill id, `template`, a
    /// link, a file too large, a malformed document, a broken reference).
    /// More than 256 `.yaml` files fail the whole list.
    pub fn list(&self) -> Result<Listing, SkillError> {
        let entries = fs::read_dir(&self.dir)
            .map_err(|err| SkillError::Storage(format!("cannot read the skill library: {err}")))?;
        let mut stems = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|err| {
                SkillError::Storage(format!("cannot read the skill library: {err}"))
            })?;
            if let Some(stem) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(SUFFIX))
            {
                if !stem.starts_with('.') {
                    stems.push(stem.to_string());
                }
            }
            if stems.len() > MAX_FILES {
                // Count the rest without reading them.
                let more = fs::read_dir(&self.dir)
                    .map(|d| {
                        d.filter_map(Result::ok)
                            .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(SUFFIX)))
                            .count()
                    })
                    .unwrap_or(stems.len());
                return Err(SkillError::TooMany(more));
            }
        }
        stems.sort();
        let mut listing = Listing::default();
        let mut parsed: HashMap<String, Result<Skill, SkillError>> = HashMap::new();
        for stem in &stems {
            let result = if is_valid_id(stem) {
                self.read(stem)
            } else {
                Err(SkillError::InvalidId)
            };
            parsed.insert(stem.clone(), result);
        }
        let mut names: HashMap<String, String> = HashMap::new();
        for stem in &stems {
            let skill = match &parsed[stem] {
                Ok(skill) => skill.clone(),
                Err(err) => {
                    listing.errors.push((stem.clone(), err.to_string()));
                    continue;
                }
            };
            let mut lookup = |target: &str| match parsed.get(target) {
                Some(Ok(skill)) => Ok(skill.clone()),
                Some(Err(err)) => Err(SkillError::Invalid(err.to_string())),
                None => Err(SkillError::NotFound),
            };
            match expand(stem, skill, &mut lookup) {
                Ok(served) => {
                    if let Some(first) = names.get(&served.skill.name) {
                        listing.errors.push((
                            stem.clone(),
                            format!("the name {} is already used by {first}", served.skill.name),
                        ));
                        continue;
                    }
                    names.insert(served.skill.name.clone(), stem.clone());
                    listing.skills.push(served);
                }
                Err(err) => listing.errors.push((stem.clone(), err.to_string())),
            }
        }
        Ok(listing)
    }
}
