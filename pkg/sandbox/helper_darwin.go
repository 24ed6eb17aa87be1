package sandbox

// run hands the command to sandbox-exec, which applies the Seatbelt
// profile to itself and execs the command, so that the command and
// everything it starts stay inside. The command is resolved here, before
// the profile applies, so that a missing or non-executable command is
// reported as on Linux; sandbox-exec then runs it by that path.
func (h *helper) run(argv []string) int {
	if len(h.sp.Seatbelt) == 0 {
		return h.exec(argv)
	}
	path, code, err := lookPath(argv[0])
	if err != nil {
		exit := exitNotExecutable
		if code == CodeCommandNotFound {
			exit = exitNotFound
		}
		return h.fail(exit, code, "%v", err)
	}
	wrapped := make([]string, 0, len(h.sp.Seatbelt)+len(argv))
	wrapped = append(wrapped, h.sp.Seatbelt...)
	wrapped = append(wrapped, path)
	return h.exec(append(wrapped, argv[1:]...))
}
