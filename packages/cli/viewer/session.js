// The page's login (design 0370). The server sets no cookie: the page keeps a session in this
// origin's localStorage (scoped to scheme, host AND port, so no other port of this machine can
// read it, and the browser sends it nowhere by itself) and sends it as `X-Polyloop-Session` on
// each request, or as `?session=` on the live streams (an EventSource cannot set headers).
//
// The URL `polyloop serve` prints holds a one-time login code in its fragment
// (`/#login=<code>`): taken out of the address bar at once, posted once, spent by the server.

const key = "polyloop-session"

/** The stored session, or null. */
export const current = () => {
  try {
    return localStorage.getItem(key)
  } catch {
    return null
  }
}

/** The headers that carry the session. */
export const headers = () => {
  const session = current()
  return session === null ? {} : { "x-polyloop-session": session }
}

/** A live stream's URL with the session. */
export const streamUrl = (path) => {
  const session = current()
  return session === null ? path : `${path}${path.includes("?") ? "&" : "?"}${new URLSearchParams({ session })}`
}

/** Posts a login (`{ login }` or `{ token }`) and keeps the session; the server's message on failure. */
const exchange = async (login) => {
  const response = await fetch("/api/session", {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json" },
    body: JSON.stringify(login)
  })
  const answer = await response.json().catch(() => null)
  if (!response.ok) throw new Error(answer?.error?.message ?? `${response.status} ${response.statusText}`)
  localStorage.setItem(key, answer.session)
}

/**
 * Takes a login code (`#login=`) or a stray `?token=` out of the address bar (replacing this
 * history entry), then exchanges the code. A spent code is ignored when a session is stored.
 */
export const start = async () => {
  const fragment = new URLSearchParams(location.hash.slice(1))
  const code = fragment.get("login")
  const query = new URLSearchParams(location.search)
  const strayToken = query.has("token")
  if (code === null && !strayToken) return
  query.delete("token")
  history.replaceState(history.state, "", `${location.pathname}${query.size > 0 ? `?${query}` : ""}`)
  if (code === null) return
  try {
    await exchange({ login: code })
  } catch (error) {
    if (current() === null) throw error
  }
}

/** Forgets the stored session (the server refused it: another start). */
export const forget = () => {
  try {
    localStorage.removeItem(key)
  } catch {
    // storage disabled: nothing kept
  }
}

/**
 * The "log in" form shown when the server answers 401: the printed URL, or the token pasted in
 * (sent in a request's body, never in a URL). `el` builds elements; `done` runs once logged in.
 */
export const form = (el, done) => {
  const input = el("input", { type: "password", name: "token", autocomplete: "off", placeholder: "the token polyloop serve printed", "aria-label": "token" })
  const outcome = el("p", { class: "outcome", role: "status" })
  const node = el(
    "form",
    { id: "login", class: "login" },
    el("h1", {}, "This viewer needs the secret of its start"),
    el("p", {}, "Open the URL `polyloop serve` printed (http://…/#login=…): it logs this browser in once. Or paste the token it printed:"),
    input,
    el("button", { type: "submit" }, "Log in"),
    outcome
  )
  node.addEventListener("submit", (event) => {
    event.preventDefault()
    const token = input.value.trim()
    if (token === "") return
    exchange({ token }).then(done, (error) => (outcome.textContent = error.message))
  })
  return node
}
