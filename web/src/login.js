// Sends the key to /login, which answers with the session cookie (HttpOnly: this script never
// sees it) or says why not.
// Why the last session ended, when the server said (a page or /api/ call with a revoked key).
if (new URLSearchParams(location.search).get("ended") === "revoked") {
  document.getElementById("error").textContent =
    "Your session ended: the API key you signed in with was revoked (bmas key revoke). " +
    "Sign in with a valid key.";
}

document.getElementById("signin").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("error");
  error.textContent = "";
  const key = document.getElementById("key").value.trim();
  const r = await fetch("/login", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ key }),
  });
  if (r.ok) {
    // Only one of the dashboard's own pages: a second slash or a backslash would leave it.
    const next = new URLSearchParams(location.search).get("next") || "";
    const page = /^\/(cluster|queue|inference|users|mode)(\/[a-z_][a-z0-9_-]*)?$/;
    location.assign(page.test(next) ? next : "/cluster");
    return;
  }
  const body = await r.json().catch(() => ({}));
  error.textContent = (body.error && body.error.message) || `sign-in failed (HTTP ${r.status})`;
});
