package confine

// run hands the command to sandbox-exec (seatbeltArgv), which applies the
// Seatbelt profile to itself and execs the command, so that the command
// and everything it starts stay inside.
func (h *helper) run(argv []string) int {
	wrapped, exit := h.seatbeltArgv(argv)
	if wrapped == nil {
		return exit
	}
	return h.exec(wrapped)
}
