//! Where a Bedrock provider's keys come from: the environment's
//! `AWS_*` variables, a shared credentials file's profile (read again when
//! it changes), or the rest of the default chain ([`super::chain`]).

use super::*;

/// The shared credentials file and the keys last read from it.
pub(super) struct CredentialsFile {
    pub(super) path: PathBuf,
    pub(super) profile: String,
    pub(super) state: Mutex<FileState>,
    /// Each set of keys read, told to the redaction for a day after it was
    /// last read (a rotated key may still be echoed by an attempt signed
    /// with it; a session token lives 12 hours at most).
    pub(super) learned: Arc<crate::observe::live_secrets::Learned>,
}

/// How long keys read from a credentials file stay redacted after they
/// were last read.
pub(super) const FILE_KEYS_KEEP_MS: u64 = 24 * 3600 * 1000;

#[derive(Default)]
pub(super) struct FileState {
    /// Modification time and length when last read.
    stamp: Option<(Option<SystemTime>, u64)>,
    loaded: Option<Result<Arc<Keys>, String>>,
}

impl CredentialsFile {
    /// The profile's keys; the file is read again when its modification time
    /// or length is not what it was at the last read (one `stat` a call).
    pub(super) fn keys(&self) -> Result<Arc<Keys>, String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let path = self.path.display();
        let stamp = match std::fs::metadata(&self.path) {
            Ok(m) => (m.modified().ok(), m.len()),
            Err(e) => {
                state.stamp = None;
                state.loaded = None;
                return Err(format!(
                    "cannot read the AWS shared credentials file {path}: {e}; create it, or point `credentials_file:` (or AWS_SHARED_CREDENTIALS_FILE) at it"
                ));
            }
        };
        if state.stamp != Some(stamp) || state.loaded.is_none() {
            let loaded = match std::fs::read_to_string(&self.path) {
                Ok(text) => parse_profile(&text, &self.profile)
                    .map(|(id, secret, token)| Arc::new(Keys::new(id, secret, token)))
                    .map_err(|why| format!("AWS shared credentials file {path}: {why}")),
                Err(e) => Err(format!(
                    "cannot read the AWS shared credentials file {path}: {e}"
                )),
            };
            if let Ok(keys) = &loaded {
                let until = crate::clock::unix_ms().saturating_add(FILE_KEYS_KEEP_MS);
                for secret in [&keys.access_key_id, &keys.secret_access_key]
                    .into_iter()
                    .chain(keys.session_token.as_ref())
                {
                    self.learned.learn(secret, until);
                }
            }
            state.stamp = Some(stamp);
            state.loaded = Some(loaded);
        }
        match &state.loaded {
            Some(loaded) => loaded.clone(),
            None => Err(format!("AWS shared credentials file {path}: not read")),
        }
    }
}

/// The keys `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` hold (with
/// `AWS_SESSION_TOKEN`): `Ok(None)` when neither is set, `Err` when only
/// one is.
pub(super) fn env_keys(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Source>, String> {
    match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => Ok(Some(Source::Env(Arc::new(Keys::new(
            id,
            secret,
            env("AWS_SESSION_TOKEN"),
        ))))),
        (Some(_), None) => Err("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both, or neither to read the shared credentials file".into()),
        (None, Some(_)) => Err("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not: set both, or neither to read the shared credentials file".into()),
        (None, None) => Ok(None),
    }
}

/// The shared credentials file's `profile` (else `AWS_PROFILE`, else
/// `default`), not read yet; `None` when no file can be found.
pub(super) fn file_source(
    credentials_file: Option<&Path>,
    profile: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Source> {
    let path = credentials_path(credentials_file, env)?;
    let profile = profile
        .map(str::to_string)
        .or_else(|| env("AWS_PROFILE"))
        .unwrap_or_else(|| "default".to_string());
    Some(Source::File(CredentialsFile {
        path,
        profile,
        state: Mutex::new(FileState::default()),
        learned: Arc::default(),
    }))
}

/// The source after the environment's keys: the shared credentials file
/// when the config names it or its profile has static keys; else the
/// profile's `credential_process` or web identity (the credentials file's
/// section, then `~/.aws/config`'s); else, when the config names neither
/// a profile nor a file, the environment's web identity, container
/// credentials and the instance profile ([`chain`]); else the file, whose
/// absence is the error.
pub(super) fn chain_source(
    provider: &str,
    region: &str,
    profile: Option<&str>,
    credentials_file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    connector: crate::upstream::transport::Connector,
) -> Result<Source, PlatformError> {
    let ambient = profile.is_none() && credentials_file.is_none();
    let name = profile
        .map(str::to_string)
        .or_else(|| env("AWS_PROFILE"))
        .unwrap_or_else(|| "default".to_string());
    let read = |p: Option<PathBuf>| p.and_then(|p| std::fs::read_to_string(p).ok());
    let mut settings = read(credentials_path(credentials_file, env))
        .and_then(|t| chain::profile_settings(&t, &name, false))
        .unwrap_or_default();
    let file = || {
        file_source(credentials_file, profile, env).ok_or_else(|| PlatformError::MissingCredentials {
            provider: provider.to_string(),
            detail: "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the provider's `credentials_file:`, or AWS_SHARED_CREDENTIALS_FILE or HOME so the shared credentials file can be found".into(),
        })
    };
    if credentials_file.is_some() || settings.contains_key("aws_access_key_id") {
        return file();
    }
    let config = env("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".aws").join("config")));
    if let Some(more) = read(config).and_then(|t| chain::profile_settings(&t, &name, true)) {
        for (k, v) in more {
            settings.entry(k).or_insert(v);
        }
    }
    match chain::choose(&name, &settings, ambient, region, env) {
        Ok(Some(how)) => Ok(Source::Fetched(Arc::new(super::super::kept::Kept::new(
            chain::Fetched::new(how, connector),
        )))),
        Ok(None) => file(),
        Err(detail) => Err(PlatformError::Credentials {
            provider: provider.to_string(),
            detail,
        }),
    }
}

/// Where the shared credentials file is: the provider's `credentials_file`
/// (a leading `~/` is the home directory), else
/// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`.
pub(super) fn credentials_path(
    configured: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    let home = || env("HOME").map(PathBuf::from);
    let expand = |p: &Path| match p.strip_prefix("~") {
        Ok(rest) => home().map(|h| h.join(rest)),
        Err(_) => Some(p.to_path_buf()),
    };
    match configured {
        Some(p) => expand(p),
        None => match env("AWS_SHARED_CREDENTIALS_FILE") {
            Some(p) => expand(Path::new(&p)),
            None => home().map(|h| h.join(".aws").join("credentials")),
        },
    }
}

pub(super) type Parsed = (String, String, Option<String>);

/// The access key id, secret key and session token of `profile` in a
/// shared credentials file (INI: `[profile]` sections, `key = value`
/// lines, `#` and `;` comments). Errors name what is missing, never a value.
pub(super) fn parse_profile(text: &str, profile: &str) -> Result<Parsed, String> {
    let mut found = false;
    let mut inside = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == profile;
            found |= inside;
            continue;
        }
        if !inside {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().to_string();
        match key.trim().to_ascii_lowercase().as_str() {
            "aws_access_key_id" => id = Some(value),
            "aws_secret_access_key" => secret = Some(value),
            "aws_session_token" | "aws_security_token" => token = Some(value),
            _ => {}
        }
    }
    if !found {
        return Err(format!(
            "it has no `[{profile}]` profile; add one, or name another with `profile:` or AWS_PROFILE"
        ));
    }
    let id = id
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("profile `{profile}` has no aws_access_key_id"))?;
    let secret = secret
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("profile `{profile}` has no aws_secret_access_key"))?;
    Ok((id, secret, token.filter(|v| !v.is_empty())))
}
