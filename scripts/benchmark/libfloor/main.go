// Command libfloor is the floor for a CLI built on the libraries the
// project requires: it links cobra and viper, builds a one-command tree,
// fork/execs its argument and prints JSON. The difference between it and
// the plain floor is the price of the libraries themselves (package init,
// a larger binary to map), which no code of ours can remove.
package main

import (
	"encoding/json"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

func main() {
	v := viper.New()
	root := &cobra.Command{
		Use:  "libfloor",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := exec.Command(args[0], args[1:]...).Run()
			return json.NewEncoder(os.Stdout).Encode(map[string]any{"success": err == nil, "config": v.ConfigFileUsed()})
		},
	}
	root.Flags().SetInterspersed(false)
	root.SetArgs(os.Args[1:])
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
