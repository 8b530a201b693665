// Sends the key to /login, which answers with the session cookie (HttpOnly: this script never
// sees it) or says why not.
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
