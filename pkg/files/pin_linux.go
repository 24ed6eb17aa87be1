package files

import "strconv"

// fdPath names the open descriptor fd as a path whose open reaches that
// very file (a /proc magic link), not whatever a name now points to.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
