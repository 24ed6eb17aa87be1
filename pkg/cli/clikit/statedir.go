package clikit

import (
	"github.com/spf13/cobra"

	"github.com/agentplane/agentplane/pkg/result"
	"github.com/agentplane/agentplane/pkg/state"
)

// AddStateDirFlag adds --state-dir to cmd's persistent flags. It can also
// come from PROGRAM_STATE_DIR, AGENTPLANE_STATE_DIR or the config file.
func AddStateDirFlag(cmd *cobra.Command, dir *string) {
	cmd.PersistentFlags().StringVar(dir, "state-dir", "", "keep jobs, sessions and history in `DIR` (one directory is one environment)")
	MarkFlags(cmd.PersistentFlags(), Configurable, "state-dir")
	MarkFlags(cmd.PersistentFlags(), NoRequest, "state-dir")
	MarkFlags(cmd.PersistentFlags(), Operator, "state-dir")
}

// OpenStateDir opens the environment's state directory: the flag's value,
// else $AGENTPLANE_STATE_DIR, else $XDG_STATE_HOME/agentplane, else
// ~/.local/state/agentplane (never one relative to the working directory:
// state.DefaultDir).
func (e *Env) OpenStateDir(flagValue string) (*state.Dir, error) {
	dir := flagValue
	if dir == "" {
		dir = state.DefaultDir(e.Getenv, e.Getenv("HOME"))
	}
	if dir == "" {
		return nil, result.Errorf(result.CodeStateDir, "no state directory: HOME is not an absolute path and the user database names no home; name one with --state-dir or AGENTPLANE_STATE_DIR")
	}
	d, err := state.Open(dir)
	if err != nil {
		return nil, result.Errorf(result.CodeStateDir, "cannot open the state directory %s: %v", dir, err)
	}
	return d, nil
}
