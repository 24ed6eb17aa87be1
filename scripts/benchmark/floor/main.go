// Command floor is the baseline for agentsh's startup cost: the least a Go
// program can do to run a command and report it as JSON.
package main

import (
	"encoding/json"
	"os"
	"os/exec"
)

func main() {
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	err := cmd.Run()
	code := 0
	if err != nil {
		code = 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"success": err == nil, "exit_code": code})
}
