//! `[ratelimit]`: where the policy's rate-limit budgets are kept. Without `redis`, in each
//! larkgate process (the default); with it, in Redis, shared by every process configured with
//! the same Redis and prefix, so that a limit holds in total however many replicas serve:
//!
//! ```toml
//! [ratelimit]
//! redis = "redis://:${REDIS_PASSWORD}@redis.internal:6379/0"   # a password only as ${VAR}
//! prefix = "larkgate:"             # in front of every key (default "larkgate:")
//! when_unreachable = "fail_closed" # or "local": this process's own budgets meanwhile
//! timeout_ms = 1000                # how long a check may wait for Redis (default 1 s)
//! ```

use std::time::Duration;

use larkgate_platform::ratelimit::shared::{SharedSettings, WhenUnreachable};
use serde::Deserialize;

/// `[ratelimit]`. See the module documentation.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimitConfig {
    redis: Option<String>,
    prefix: Option<String>,
    when_unreachable: Option<String>,
    timeout_ms: Option<u64>,
}

impl RateLimitConfig {
    /// The shared settings (`None`: budgets in this process), the URL's `${VAR}`s read through
    /// `env`, checked without connecting. The error never holds the password.
    pub(crate) fn shared(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<SharedSettings>, String> {
        let Some(url) = &self.redis else {
            if self.prefix.is_some() || self.when_unreachable.is_some() || self.timeout_ms.is_some()
            {
                return Err(
                    "ratelimit.prefix, when_unreachable and timeout_ms apply to budgets \
                     kept in Redis: set ratelimit.redis = \"redis://HOST:6379\" too, or remove them"
                        .to_owned(),
                );
            }
            return Ok(None);
        };
        // A password in the URL must be a reference to the environment.
        let authority = url.split("://").nth(1).unwrap_or_default();
        let authority = authority.split('/').next().unwrap_or_default();
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
            && !(password.starts_with("${") && password.ends_with('}'))
        {
            return Err("ratelimit.redis holds a password: write it as \
                 redis://:${VARIABLE}@HOST:6379 and set VARIABLE"
                .to_owned());
        }
        let expanded = larkgate_upstream::config::expand(url, &env)
            .map_err(|e| format!("ratelimit.redis: {e}"))?;
        let mut settings = SharedSettings::new(&expanded)?;
        if let Some(prefix) = &self.prefix {
            if prefix.is_empty()
                || prefix.len() > 64
                || !prefix.chars().all(|c| c.is_ascii_graphic())
            {
                return Err(format!(
                    "ratelimit.prefix {prefix:?} must be 1 to 64 visible ASCII characters"
                ));
            }
            settings.prefix = prefix.clone();
        }
        settings.when_unreachable = match self.when_unreachable.as_deref() {
            None | Some("fail_closed") => WhenUnreachable::FailClosed,
            Some("local") => WhenUnreachable::Local,
            Some(other) => {
                return Err(format!(
                    "ratelimit.when_unreachable is \"fail_closed\" (refuse calls while Redis \
                     cannot be reached) or \"local\" (count them in this process), not {other:?}"
                ));
            }
        };
        if let Some(ms) = self.timeout_ms {
            if !(1..=60_000).contains(&ms) {
                return Err("ratelimit.timeout_ms must be between 1 and 60000".to_owned());
            }
            settings.timeout = Duration::from_millis(ms);
        }
        Ok(Some(settings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(text: &str) -> Result<Option<SharedSettings>, String> {
        toml::from_str::<RateLimitConfig>(text)
            .unwrap()
            .shared(|name| (name == "REDIS_PASSWORD").then(|| "s3cret".to_owned()))
    }

    #[test]
    fn without_redis_the_budgets_stay_in_the_process() {
        assert!(shared("").unwrap().is_none());
    }

    #[test]
    fn redis_settings_are_read_with_the_password_from_the_environment() {
        let settings = shared(
            "redis = \"redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0\"\nprefix = \"acme:\"\n\
             when_unreachable = \"local\"\ntimeout_ms = 250\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(settings.prefix, "acme:");
        assert_eq!(settings.when_unreachable, WhenUnreachable::Local);
        assert_eq!(settings.timeout, Duration::from_millis(250));
        let defaults = shared("redis = \"redis://127.0.0.1\"").unwrap().unwrap();
        assert_eq!(defaults.prefix, "larkgate:");
        assert_eq!(defaults.when_unreachable, WhenUnreachable::FailClosed);
    }

    #[test]
    fn mistakes_are_refused_with_what_to_write_and_no_secret() {
        let cases = [
            ("prefix = \"x:\"", "set ratelimit.redis"),
            ("redis = \"redis://:s3cret@h:6379\"", "holds a password"),
            ("redis = \"redis://user:s3cret@h:6379\"", "holds a password"),
            (
                "redis = \"redis://:${NOT_SET_ANYWHERE}@h\"",
                "NOT_SET_ANYWHERE is not set",
            ),
            ("redis = \"http://h:6379\"", "Redis URL"),
            ("redis = \"redis://h\"\nprefix = \"\"", "ratelimit.prefix"),
            (
                "redis = \"redis://h\"\nprefix = \"a b\"",
                "ratelimit.prefix",
            ),
            (
                "redis = \"redis://h\"\nwhen_unreachable = \"open\"",
                "fail_closed",
            ),
            ("redis = \"redis://h\"\ntimeout_ms = 0", "timeout_ms"),
        ];
        for (text, expected) in cases {
            let error = shared(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
            assert!(!error.contains("s3cret"), "{text}: {error}");
        }
    }
}
