// The server operators run: signaling and the SFU, and nothing of the client (no codecs, no X11,
// no libavformat): `rtc-server --secret S` (or `--dev`). `rtc-cli server` takes the same options.
import ServerCommandLine

await ServerCommand.main()
