// Loaded first by VS Code's page (the executor adds it; see runtimes/vscode.rs). The workspace
// shows VS Code in an iframe of another site, and a browser that blocks third-party storage
// (Chromium does by default, Safari always) throws on every touch of `localStorage` there, which
// the workbench does not survive. Then both storages are kept in memory for the page's life:
// what VS Code keeps in them is view state; settings live in the sandbox.
(function () {
  function memory() {
    var items = new Map();
    return {
      getItem: function (k) { return items.has(String(k)) ? items.get(String(k)) : null; },
      setItem: function (k, v) { items.set(String(k), String(v)); },
      removeItem: function (k) { items.delete(String(k)); },
      clear: function () { items.clear(); },
      key: function (i) { return Array.from(items.keys())[i] === undefined ? null : Array.from(items.keys())[i]; },
      get length() { return items.size; },
    };
  }
  ["localStorage", "sessionStorage"].forEach(function (name) {
    try {
      void window[name].length;
    } catch (e) {
      Object.defineProperty(window, name, { value: memory(), configurable: true });
    }
  });
})();
