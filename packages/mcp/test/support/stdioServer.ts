/**
 * The test server over stdio: `node --import tsx stdioServer.ts [recordFile] [variant]`.
 */
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"
import { makeTestServer, recordPid } from "./testServer.js"

const [recordFile, variant] = process.argv.slice(2)
const options = {
  ...(recordFile === undefined || recordFile === "-" ? {} : { recordFile }),
  ...(variant === undefined ? {} : { variant })
}
recordPid(options.recordFile)
process.stderr.write("test server ready\n")
await makeTestServer(options).connect(new StdioServerTransport())
