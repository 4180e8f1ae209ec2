#!/usr/bin/env bash
# Regenerate the shell completion scripts after a CLI change. Needs gpupoolctl installed
# (pip install -e .). The scripts are dynamic: they call gpupoolctl back to complete.
set -euo pipefail
cd "$(dirname "$0")"
_GPUPOOLCTL_COMPLETE=source_bash gpupoolctl > gpupoolctl.bash
_GPUPOOLCTL_COMPLETE=source_zsh gpupoolctl > _gpupoolctl
_GPUPOOLCTL_COMPLETE=source_fish gpupoolctl > gpupoolctl.fish
