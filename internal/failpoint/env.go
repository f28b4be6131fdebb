package failpoint

// EnvVar names the environment variable read at the first Inject (builds
// with the failpoints tag only).
const EnvVar = "FERRY_FAILPOINTS"
