// The memory explorer's only script (served from /ui/static/, allowed by the page's CSP):
// confirmation of destructive forms, the time-travel slider, and self-refresh of live pages.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });
  document.addEventListener("DOMContentLoaded", function () {
    var slider = document.getElementById("as-of-slider");
    if (slider) {
      var target = document.getElementById(slider.getAttribute("data-target"));
      slider.addEventListener("input", function () {
        target.value = new Date(Number(slider.value) * 1000).toISOString().replace(".000Z", "+00:00");
      });
      slider.addEventListener("change", function () {
        slider.form.submit();
      });
    }
    var seconds = Number(document.body.getAttribute("data-live") || 0);
    if (seconds > 0) {
      window.setTimeout(function () {
        if (!document.hidden) { window.location.reload(); }
      }, seconds * 1000);
    }
  });
})();
