// The confirmation every destructive action asks for: a real <dialog> element (not
// window.confirm), so an operator sees exactly what will happen and a browser test can
// click it.
import {h, replace} from './dom.js';

let dialog = null;

function build() {
  dialog = h('dialog.confirm', {id: 'confirm-dialog'},
    h('form', {method: 'dialog'},
      h('h3.confirm-title'),
      h('p.confirm-text'),
      h('div.confirm-buttons', null,
        h('button.btn', {value: 'cancel', id: 'confirm-cancel', type: 'submit'}, 'Cancel'),
        h('button.btn.btn-danger', {value: 'ok', id: 'confirm-ok', type: 'submit'}, 'Confirm'))));
  document.body.append(dialog);
}

/**
 * Ask before an action: resolves true when the operator clicks the confirm button.
 * verb ("Delete", "Empty", ...) and what ("topic orders") are inserted as text.
 */
export function confirmAction(title, text, verb = 'Confirm') {
  if (!dialog) build();
  replace(dialog.querySelector('.confirm-title'), title);
  replace(dialog.querySelector('.confirm-text'), text);
  dialog.querySelector('#confirm-ok').textContent = verb;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), {once: true});
    dialog.returnValue = '';
    dialog.showModal();
    dialog.querySelector('#confirm-cancel').focus();
  });
}
