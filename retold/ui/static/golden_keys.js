// Keyboard shortcuts of the golden-set labelling page (retold/ui/pages/golden.py).
// 1-9 and 0 tick a candidate, n "nothing stored", a the answer field, s save and go to
// the next item to label, j and k the next and previous item. Keys typed into the
// answer field stay there; Escape leaves it.
document.addEventListener("keydown", function (event) {
  if (event.altKey || event.ctrlKey || event.metaKey) {
    return;
  }
  var form = document.getElementById("label");
  var typing = event.target instanceof HTMLInputElement && event.target.type === "text";
  if (typing) {
    if (event.key === "Escape") {
      event.target.blur();
    }
    return;
  }
  var key = event.key;
  var boxes = form ? form.querySelectorAll("input[name=expect]:not([disabled])") : [];
  var index = "1234567890".indexOf(key);
  var link;
  if (index >= 0 && index < boxes.length) {
    boxes[index].click();
  } else if (key === "n" && form && form.elements.nothing && !form.elements.nothing.disabled) {
    form.elements.nothing.click();
  } else if (key === "a" && form && form.elements.answer && !form.elements.answer.disabled) {
    form.elements.answer.focus();
  } else if (key === "s" && form && form.querySelector("button")) {
    form.requestSubmit();
  } else if ((key === "j" || key === "k") && (link = document.getElementById(key === "j" ? "next" : "previous"))) {
    link.click();
  } else {
    return;
  }
  event.preventDefault();
});
