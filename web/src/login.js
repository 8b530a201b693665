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
    const next = new URLSearchParams(location.search).get("next") || "/cluster";
    location.assign(next.startsWith("/") && !next.startsWith("//") ? next : "/cluster");
    return;
  }
  const body = await r.json().catch(() => ({}));
  error.textContent = (body.error && body.error.message) || `sign-in failed (HTTP ${r.status})`;
});
